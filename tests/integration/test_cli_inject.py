"""``orders inject``: one step's faults can be removed without touching the others."""

from __future__ import annotations

from cli_processes import app_for
from test_cli_bad_input import run

from orders.worker.faults import FaultStore


def faults(env: dict[str, str]) -> dict[str, float]:
    app = app_for(env, migrate=False)
    try:
        store = FaultStore(app.redis, app.settings.queue_prefix)
        return {step: config.fail_rate + config.crash_rate for step, config in store.all().items()}
    finally:
        app.close()


def test_one_steps_faults_are_removed_by_clear_or_rate_zero(
    cli_env: dict[str, str], key_prefix: str
) -> None:
    env = dict(cli_env, ORDERS_QUEUE_PREFIX=key_prefix)
    assert run(env, "db", "upgrade").returncode == 0  # a configured database starts empty
    for step in ("stock", "points", "logistics"):
        done = run(env, "inject", step, "--crash-rate", "0.5")
        assert done.returncode == 0, done.stderr
    cleared = run(env, "inject", "stock", "--clear")
    assert cleared.returncode == 0, cleared.stderr
    assert "stock: injected faults removed" in cleared.stdout
    assert faults(env) == {"points": 0.5, "logistics": 0.5}
    zero = run(env, "inject", "points", "--crash-rate", "0")
    assert zero.returncode == 0, zero.stderr
    assert faults(env) == {"logistics": 0.5}


def test_inject_without_a_fault_says_how_to_remove_one(cli_env: dict[str, str]) -> None:
    proc = run(cli_env, "inject", "stock")
    assert proc.returncode == 2
    assert "orders inject stock --clear" in " ".join(proc.stderr.split())
    mixed = run(cli_env, "inject", "stock", "--clear", "--fail-rate", "0.1")
    assert mixed.returncode == 2 and "--clear takes no fault options" in mixed.stderr
