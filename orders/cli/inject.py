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
        float | None, number_option(min=0.0, max=1.0, help="Probability a run fails.")
    ] = None,
    permanent: Annotated[
        bool, typer.Option(help="Injected failures are permanent (DLQ at once).")
    ] = False,
    crash_rate: Annotated[
        float | None,
        number_option(
            min=0.0, max=1.0, help="Probability the worker kills itself after the effect."
        ),
    ] = None,
    delay_ms: Annotated[
        int | None,
        typer.Option(min=0, max=MAX_DELAY_MS, help="Sleep before each run, milliseconds."),
    ] = None,
    clear: Annotated[
        bool,
        typer.Option("--clear", help="Remove STEP's injected faults (without STEP: every step's)."),
    ] = False,
) -> None:
    """Inject failures into STEP; running workers pick them up within a second.

    Injecting into a step again replaces its earlier fault as a whole (options not
    given are off). `orders inject STEP --clear` (or rates of 0) removes STEP's
    faults; `orders inject --clear` removes every step's.

    Examples: `orders inject points --fail-rate 0.3`, `orders inject logistics
    --fail-rate 0.05 --permanent`, `orders inject points --clear`, `orders inject --clear`.
    """
    given = [v for v in (fail_rate, crash_rate, delay_ms) if v is not None]
    if step is not None and step not in ALL_STEPS:
        fail(f"unknown step {step!r}; choose from {', '.join(ALL_STEPS)}", code=2)
    if clear and (given or permanent):
        fail("--clear takes no fault options", code=2)
    if step is None and not clear:
        fail("name a step, or use --clear", code=2)
    if step is not None and not clear and not given:
        fail(
            "nothing to inject: give --fail-rate, --crash-rate or --delay-ms "
            f"(to remove this step's faults: orders inject {step} --clear)",
            code=2,
        )
    app = make_app()
    try:
        store = FaultStore(app.redis, app.settings.queue_prefix)
        if step is None:
            store.clear()
            say("cleared every injected fault")
            return
        config = FaultConfig(
            fail_rate=fail_rate or 0.0,
            permanent=permanent,
            crash_rate=crash_rate or 0.0,
            delay_ms=delay_ms or 0,
        )
        if clear or not config.active:
            store.set(step, FaultConfig())  # a config that injects nothing clears the step
            say("{}: injected faults removed (workers pick it up within a second)", step)
            return
        store.set(step, config)
        say("{}: {} (workers pick it up within a second)", step, fault_summary(config.model_dump()))
    finally:
        app.close()
