"""A checker that cannot fail proves nothing: a broken build must fail the chaos run.

The broken builds (``broken_build/sitecustomize.py``, loaded only by this test
through ``PYTHONPATH``): one lets a redelivered stock step deduct again, and the
test drops the unique index that would still refuse the second deduction row;
replaying finished stock jobs then doubles deductions. The other sabotages a
compensation: a cancelled order's stock comes back twice. Either way the run
must exit 1 and name the invariant (and the orders or parts).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from chaos_helpers import run_chaos
from sqlalchemy import text

from orders.app.db import make_engine
from orders.app.migrate import upgrade_database
from orders.domain.invariants import CONSERVATION, ONE_DEDUCTION

BROKEN_BUILD = Path(__file__).parent / "broken_build"
UNIQUE_DEDUCTION = "uq_stock_deductions_order_id_part_id"


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
    env = dict(
        chaos_env,
        ORDERFLOW_TEST_BROKEN_BUILD="stock_twice",
        PYTHONPATH=os.pathsep.join(
            p for p in (str(BROKEN_BUILD), chaos_env.get("PYTHONPATH", "")) if p
        ),
    )

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
        "--hang", "",
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
    env = dict(
        chaos_env,
        ORDERFLOW_TEST_BROKEN_BUILD="return_twice",
        PYTHONPATH=os.pathsep.join(
            p for p in (str(BROKEN_BUILD), chaos_env.get("PYTHONPATH", "")) if p
        ),
    )

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
