"""A benchmark's results file never replaces an earlier one of the same name."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import report


def test_second_run_of_the_day_takes_a_new_name(tmp_path: Path) -> None:
    first = report.write_results([{"run": 1}], "orderflow-e2e", directory=tmp_path)
    second = report.write_results([{"run": 2}], "orderflow-e2e", directory=tmp_path)
    third = report.write_results([{"run": 3}], "orderflow-e2e", directory=tmp_path)

    assert len({first, second, third}) == 3
    assert second.name == first.name.replace(".json", "-2.json")
    assert third.name == first.name.replace(".json", "-3.json")
    assert [json.loads(p.read_text()) for p in (first, second, third)] == [
        [{"run": 1}],
        [{"run": 2}],
        [{"run": 3}],
    ]
