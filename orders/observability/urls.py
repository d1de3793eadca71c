"""Never print a password: mask the credentials of URLs.

A Redis or database URL may carry ``user:password@``; everything the CLI, the
web dashboard or a log line shows goes through :func:`mask_url` or
:func:`mask_urls_in` first.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

MASK = "***"

# scheme://[user][:password]@host... ; the password part is everything up to the last
# '@' before the host (passwords may contain ':' but not an unescaped '@' or '/').
_CREDENTIALS = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^:/@\s]*):(?P<password>[^@\s/]+)@"
)


def mask_url(url: str | None) -> str | None:
    """Return ``url`` with its password replaced by ``***`` (user and host kept).

    Args:
        url: any URL (``redis://:secret@host:6379/0``,
            ``postgresql://user:secret@host/db``), or None.

    Returns:
        The same URL with the password masked; URLs without a password are
        returned unchanged; None stays None. Never raises: a string that does
        not parse as a URL is masked with the same pattern as free text.
    """
    if url is None:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return mask_urls_in(url)
    if parts.password is None:
        return mask_urls_in(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    netloc = f"{parts.username or ''}:{MASK}@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def mask_urls_in(text: str) -> str:
    """Mask the password of every ``scheme://user:password@`` inside free text.

    Args:
        text: a log message, an error message, a traceback.

    Returns:
        ``text`` with each such password replaced by ``***``.
    """
    if "://" not in text:
        return text
    return _CREDENTIALS.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
