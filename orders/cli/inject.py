"""``orders inject``: make a step fail, crash or slow down, to watch retries and DLQ."""

from __future__ import annotations

from typing import Annotated

import typer

from orders.cli.context import fail, handle_errors, make_app
from orders.cli.options import number_option
from orders.cli.render import fault_summary, say
from orders.domain.steps import ALL_STEPS
from orders.worker.faults import FaultConfig, FaultStore

MAX_DELAY_MS = 600_000  # ten minutes: longer than any lease, short of a hung worker


@handle_errors
def inject(
    step: Annotated[
        str | None, typer.Argument(help=f"Step to affect: {', '.join(ALL_STEPS)}.")
    ] = None,
    fail_rate: Annotated[
        float, number_option(min=0.0, max=1.0, help="Probability a run fails.")
    ] = 0.0,
    permanent: Annotated[
        bool, typer.Option(help="Injected failures are permanent (DLQ at once).")
    ] = False,
    crash_rate: Annotated[
        float,
        number_option(
            min=0.0, max=1.0, help="Probability the worker kills itself after the effect."
        ),
    ] = 0.0,
    delay_ms: Annotated[
        int, typer.Option(min=0, max=MAX_DELAY_MS, help="Sleep before each run, milliseconds.")
    ] = 0,
    clear: Annotated[bool, typer.Option("--clear", help="Remove every injected fault.")] = False,
) -> None:
    """Inject failures into STEP; running workers pick them up within a second.

    Examples: `orders inject points --fail-rate 0.3`, `orders inject logistics
    --fail-rate 0.05 --permanent`, `orders inject --clear`.
    """
    if clear:
        if step is not None:
            fail("--clear takes no step", code=2)
        app = make_app()
        FaultStore(app.redis, app.settings.queue_prefix).clear()
        say("cleared every injected fault")
        return
    if step is None:
        fail("name a step, or use --clear", code=2)
    if step not in ALL_STEPS:
        fail(f"unknown step {step!r}; choose from {', '.join(ALL_STEPS)}", code=2)
    config = FaultConfig(
        fail_rate=fail_rate, permanent=permanent, crash_rate=crash_rate, delay_ms=delay_ms
    )
    if not config.active:
        fail(
            "nothing to inject: give --fail-rate, --crash-rate or --delay-ms "
            "(to remove faults: orders inject --clear)",
            code=2,
        )
    app = make_app()
    FaultStore(app.redis, app.settings.queue_prefix).set(step, config)
    say("{}: {} (workers pick it up within a second)", step, fault_summary(config.model_dump()))
