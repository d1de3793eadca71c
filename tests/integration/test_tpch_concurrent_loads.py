"""Loads of TPC-H that run at the same time: one loads, the others find it loaded."""

from __future__ import annotations

import fcntl
import json
import subprocess
from pathlib import Path

import pytest
from cli_processes import orders_command

from orders.domain.errors import TpchLoadBusy
from orders.sources.tpch import LOCK_FILE, load_tpch

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
