"""A checker that cannot fail proves nothing: a broken build must fail the chaos run.

The broken builds (``broken_build/sitecustomize.py``, loaded only by this test
through ``PYTHONPATH``): one lets a redelivered stock step deduct again, and the
test drops the unique index that would still refuse the second deduction row;
replaying finished stock jobs then doubles deductions. Another sabotages a
compensation: a cancelled order's stock comes back twice. The third takes the
lease's fencing away from the database: a run its worker timed out wakes in its
abandoned thread and commits, once, so only the attempt journal can tell. Each
time the run must exit 1 and name the invariant (and the orders or parts).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from chaos_helpers import run_chaos
from sqlalchemy import text

from orders.app.db import make_engine
from orders.app.invariants import CONSERVATION, ONE_DEDUCTION
from orders.app.migrate import upgrade_database
from orders.chaos.journal import LAPSED_COMMIT

BROKEN_BUILD = Path(__file__).parent / "broken_build"
UNIQUE_DEDUCTION = "uq_stock_deductions_order_id_part_id"


def broken_build_env(chaos_env: dict[str, str], build: str) -> dict[str, str]:
    """The chaos run's environment with the broken build ``build`` loaded in every
    process (``broken_build/sitecustomize.py``)."""
    path = os.pathsep.join(p for p in (str(BROKEN_BUILD), chaos_env.get("PYTHONPATH", "")) if p)
    return dict(chaos_env, ORDERFLOW_TEST_BROKEN_BUILD=build, PYTHONPATH=path)


def drop_unique_deduction_index(database_url: str) -> None:
    upgrade_database(database_url)
    engine = make_engine(database_url)
    try:
        with engine.begin() as conn:
            conn.execute(text(f"DROP INDEX {UNIQUE_DEDUCTION}"))
    finally:
        engine.dispose()


@pytest.mark.chaos
@pytest.mark.timeout(240)
def test_double_deductions_from_a_broken_build_fail_the_run_naming_the_orders(
    chaos_env: dict[str, str], data_dir: Path, database_url: str
) -> None:
    drop_unique_deduction_index(database_url)
    env = broken_build_env(chaos_env, "stock_twice")

    code, report, _ = run_chaos(
        env,
        data_dir,
        "--orders", "120",
        "--rate", "40",
        "--workers-per-step", "1",
        "--kill-every", "0",
        "--term-every", "0",
        "--redis-kill-every", "0",
        "--fail-rate", "0",
        "--slow-rate", "0",
        "--crash-once", "",
        "--poison", "",
        # replays need finished stock jobs: nothing may stall the one stock worker
        "--hang", "",
        "--freeze-every", "0",
        "--freeze-in-tx-rate", "0",
        "--replay-every", "0.5",
        "--replay-count", "10",
        "--replay-steps", "stock",
        "--evict-every", "0",
        "--seed", "5",
    )  # fmt: skip

    assert code == 1
    assert report["ok"] is False
    doubled = [f for f in report["findings"] if f["invariant"] == ONE_DEDUCTION]
    assert doubled, report["findings"]
    assert all(f.get("order_id") for f in doubled)
    assert any("2 deductions of part" in f["detail"] for f in doubled)
    # the replayed redeliveries were the only fault, and they did happen
    assert report["delivery"]["replayed"] > 0


@pytest.mark.chaos
@pytest.mark.timeout(240)
def test_a_compensation_that_returns_stock_twice_fails_the_run_naming_the_parts(
    chaos_env: dict[str, str], data_dir: Path, database_url: str
) -> None:
    env = broken_build_env(chaos_env, "return_twice")

    code, report, _ = run_chaos(
        env,
        data_dir,
        "--orders", "150",
        "--rate", "30",
        "--cancel", "15",
        "--workers-per-step", "1",
        "--kill-every", "0",
        "--term-every", "0",
        "--redis-kill-every", "0",
        "--fail-rate", "0.3",
        "--fail-steps", "notification,points",
        "--slow-rate", "0",
        "--crash-once", "",
        # the stock step must keep pace: cancellations pick orders whose stock is
        # deducted, and only those have stock to return. The default hang and freezes
        # stall the one stock worker for seconds of the 5 s window (a CI run under
        # load returned none)
        "--hang", "",
        "--freeze-every", "0",
        "--freeze-in-tx-rate", "0",
        "--replay-every", "0",
        "--evict-every", "0",
        "--seed", "5",
    )  # fmt: skip

    assert code == 1
    assert report["ok"] is False
    assert report["orders"]["cancelled"] > 0
    assert report["delivery"]["per_step"]["return_stock"]["distinct_effects"] > 0
    doubled = [f for f in report["findings"] if f["invariant"] == CONSERVATION]
    assert doubled, report["findings"]
    assert all(f.get("part_id") for f in doubled)
    assert any("returned" in f["detail"] for f in doubled)


UNFENCED_RUN = (
    "--orders", "30",
    # the hang is on only while orders are placed: at 15/s that was 2 s, in which a
    # loaded machine's workers could start no stock run at all (a CI run saw none lapse)
    "--rate", "5",
    "--workers-per-step", "1",
    "--kill-every", "0",
    "--term-every", "0",
    "--redis-kill-every", "0",
    "--freeze-every", "0",
    "--freeze-in-tx-rate", "0",
    "--fail-rate", "0",
    "--slow-rate", "0",
    "--crash-once", "",
    "--poison", "",
    "--cancel", "0",
    "--hang", "stock",
    "--hang-rate", "1",
    "--hang-ms", "4000",
    "--time-limit", "1.5",
    "--replay-every", "0",
    "--evict-every", "0",
    # the hung stock runs hold back every later step: no notification reaches the
    # rate limit and the run ends before the first pause; tests/chaos covers both
    "--pause", "",
    "--limit-step", "",
    "--seed", "5",
)  # fmt: skip


@pytest.mark.chaos
@pytest.mark.timeout(240)
def test_a_timed_out_run_that_commits_in_an_unfenced_build_fails_the_run(
    chaos_env: dict[str, str], data_dir: Path
) -> None:
    env = broken_build_env(chaos_env, "unfenced")

    code, report, _ = run_chaos(env, data_dir, *UNFENCED_RUN)

    assert code == 1
    assert report["ok"] is False
    lapsed = [f for f in report["findings"] if f["invariant"] == LAPSED_COMMIT]
    assert lapsed, report["findings"]
    assert all(f.get("order_id") for f in lapsed)
    assert any("timed_out" in f["detail"] for f in lapsed)
    # every effect still applied once: the older invariants cannot see this one
    assert {f["invariant"] for f in report["findings"]} == {LAPSED_COMMIT}


@pytest.mark.chaos
@pytest.mark.timeout(240)
def test_the_same_run_on_the_real_build_holds(chaos_env: dict[str, str], data_dir: Path) -> None:
    code, report, _ = run_chaos(chaos_env, data_dir, *UNFENCED_RUN)

    assert report["findings"] == [] and code == 0
    assert report["delivery"]["attempts_given_up"].get("timed_out", 0) > 0
