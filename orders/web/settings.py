"""Settings of the web dashboard, from ``ORDERS_WEB_*`` environment variables."""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class WebSettings(BaseSettings):
    """How ``orders web`` serves and whom it lets act.

    Attributes:
        token: the secret that unlocks actions (redrive, purge); unset, every
            action is refused. ``ORDERS_WEB_TOKEN``.
            Shorter than 16 characters, the dashboard refuses to start.
        host / port: where to listen (``ORDERS_WEB_HOST``, ``ORDERS_WEB_PORT``).
        allowed_hosts: host names, comma separated, that requests may carry in
            their ``Host`` header besides the bound address, ``localhost``,
            ``127.0.0.1`` and ``::1`` (``ORDERS_WEB_ALLOWED_HOSTS``, e.g. the
            machine's name when binding 0.0.0.0). Others are answered 400.
        session_hours: how long a sign-in lasts, hours.
        sample_seconds: seconds between two readings of the queues (charts, rates).
        history_seconds: how much chart history is kept in memory, seconds.
        api_rate_per_second / api_burst: each API token's request rate (requests per
            second, refilled) and burst (requests at once), in this process
            (``ORDERS_WEB_API_RATE_PER_SECOND``, ``ORDERS_WEB_API_BURST``); past it, 429.
        idempotency_hours: how long an ``Idempotency-Key`` of ``POST /api/v1/orders``
            is kept, hours (``ORDERS_WEB_IDEMPOTENCY_HOURS``).
    """

    model_config = SettingsConfigDict(env_prefix="ORDERS_WEB_", extra="ignore", allow_inf_nan=False)

    token: SecretStr | None = Field(default=None, description="Secret unlocking actions.")
    host: str = Field(default="127.0.0.1", description="Address to bind.")
    allowed_hosts: str = Field(default="", description="More Host names, comma separated.")
    port: int = Field(default=8080, ge=0, le=65535, description="TCP port.")
    session_hours: float = Field(
        default=12.0, gt=0, le=24 * 366, description="Sign-in lifetime, hours."
    )
    sample_seconds: float = Field(
        default=2.0, gt=0, le=3600, description="Queue sampling period, s."
    )
    history_seconds: float = Field(
        default=600.0, gt=0, le=7 * 86400, description="Chart history kept, s."
    )
    api_rate_per_second: float = Field(
        default=100.0, gt=0, le=1_000_000, description="API requests per second per token."
    )
    api_burst: int = Field(default=200, ge=1, le=1_000_000, description="API burst per token.")
    idempotency_hours: float = Field(
        default=24.0, gt=0, le=24 * 366, description="Idempotency-Key lifetime, hours."
    )

    def token_value(self) -> str | None:
        """The token as plain text, or None when unset or empty."""
        if self.token is None:
            return None
        value = self.token.get_secret_value()
        return value or None

    def allowed_host_names(self) -> list[str]:
        """``allowed_hosts`` split on commas and white space, empty entries dropped."""
        return [name for name in self.allowed_hosts.replace(",", " ").split() if name]
