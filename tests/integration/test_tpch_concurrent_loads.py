"""Loads of TPC-H that run at the same time: one loads, the others find it loaded."""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from cli_processes import orders_command
from sqlalchemy import func, select

from orders.domain.errors import TpchLoadBusy
from orders.domain.models import Customer, StreamCursor
from orders.sources.tpch import LOCK_FILE, load_tpch, tpchgen_executable

SCALE_001 = {"customers": 1500, "products": 2000, "orders": 15000, "lines": 60175}


@pytest.mark.slow
def test_two_first_time_load_tpch_runs_on_one_data_dir_both_succeed_and_load_once(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    logs = [tmp_path / f"load-{n}.log" for n in range(2)]
    runs = []
    for log in logs:
        with log.open("wb") as err:
            command = [*orders_command(), "load-tpch", "--json"]
            runs.append(subprocess.Popen(command, env=cli_env, stdout=subprocess.PIPE, stderr=err))
    outputs = [run.communicate(timeout=60)[0] for run in runs]

    assert [run.returncode for run in runs] == [0, 0], [log.read_text() for log in logs]
    results = [json.loads(out) for out in outputs]
    assert sorted(r["loaded"] for r in results) == [False, True]
    for result in results:
        assert {k: result[k] for k in SCALE_001} == SCALE_001


@pytest.mark.slow
def test_a_load_that_loses_the_race_on_a_shared_database_reports_already_loaded(
    session_factory, database_url: str, tmp_path: Path
) -> None:
    # Another machine (another data dir, so another lock) loads the same database
    # while this load's files are being generated: this load's insert conflicts.
    other = {k: v for k, v in os.environ.items() if not k.startswith("ORDERS_")}
    other.update(ORDERS_DATA_DIR=str(tmp_path / "other"), ORDERS_DATABASE_URL=database_url)
    exports = "".join(
        f"export {k}={shlex.quote(v)}\n" for k, v in other.items() if k.isidentifier()
    )
    generator = tmp_path / "tpchgen-then-another-load"
    generator.write_text(
        "#!/bin/sh\nset -e\n"
        f'{shlex.quote(tpchgen_executable())} "$@"\n'
        f"{exports}"
        f"{shlex.join([*orders_command(), 'load-tpch'])} >/dev/null\n"
    )
    generator.chmod(0o700)

    result = load_tpch(session_factory, tmp_path / "data", 0.01, executable=str(generator))

    assert not result.loaded
    assert (result.customers, result.orders, result.lines) == (1500, 15000, 60175)
    with session_factory() as session:
        assert session.scalar(select(func.count()).select_from(Customer)) == 1500
        assert session.get(StreamCursor, "tpch") is not None


def test_a_load_waiting_too_long_for_another_loads_lock_fails_with_a_message(
    session_factory, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    (data_dir / "tpch").mkdir(parents=True)
    waits: list[None] = []
    with (data_dir / "tpch" / LOCK_FILE).open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a running load of this data dir holds it

        with pytest.raises(TpchLoadBusy, match="another TPC-H load"):
            load_tpch(
                session_factory,
                data_dir,
                0.01,
                lock_timeout=0.2,
                on_wait=lambda: waits.append(None),
            )

    assert waits == [None]  # told once that it waits
    assert not (data_dir / "tpch" / "sf0.01").exists()  # nothing generated
