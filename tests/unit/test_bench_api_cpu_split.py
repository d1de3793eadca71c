"""`benchmarks api` says where a run's CPU went: per part, per order, and how busy the
machine's cores were."""

from __future__ import annotations

import os

from benchmarks.api import cpu_split

PARTS = ("web", "workers", "redis", "database", "load", "machine")


def test_each_part_is_its_cpu_over_the_orders_and_the_machine_share_is_over_its_cores() -> None:
    cores = os.cpu_count() or 1
    before = dict.fromkeys(PARTS, 10.0) | {"wall": 100.0}
    after = {
        "web": 10.5,
        "workers": 11.0,
        "redis": 10.1,
        "database": 10.0,
        "load": 10.2,
        "machine": 10.0 + 1.5 * cores,
        "wall": 102.0,
    }
    split = cpu_split(before, after, 500)
    assert split["web_cpu_ms_per_order"] == 1.0
    assert split["workers_cpu_ms_per_order"] == 2.0
    assert split["redis_cpu_ms_per_order"] == 0.2
    assert split["database_cpu_ms_per_order"] == 0.0
    assert split["load_cpu_ms_per_order"] == 0.4
    assert split["machine_cpu_ms_per_order"] == round(1000 * 1.5 * cores / 500, 2)
    assert split["machine_busy_share"] == 0.75  # 1.5 core-seconds a second of 2 s


def test_no_orders_gives_no_per_order_figures() -> None:
    same = dict.fromkeys(PARTS, 1.0) | {"wall": 5.0}
    split = cpu_split(same, same, 0)
    assert all(split[f"{p}_cpu_ms_per_order"] is None for p in PARTS)
    assert split["machine_busy_share"] is None  # no time passed
