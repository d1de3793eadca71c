"""``orders chaos`` end to end: every fault really happens and every invariant still holds.

Real worker processes are SIGKILLed, SIGTERMed and frozen (SIGSTOP, then
SIGCONT; some stop themselves inside a write transaction), the embedded Redis server is
SIGKILLed and restarted on its data dir (always an embedded server, also when
``TEST_REDIS_URL`` is set: see conftest), handlers fail, stall past their lease
and kill their own process, and finished jobs are replayed. The report is read
from the command's JSON output; its verdict comes from the database.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from chaos_helpers import fault_counts, run_chaos
from cli_processes import free_port
from metrics_replay import (
    Scraper,
    alert_expressions,
    create_blocks,
    dashboard_expressions,
    local_prometheus,
    openmetrics_history,
    problems,
)

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"

EVERY_FAULT = (
    "worker_sigkill",
    "worker_sigterm",
    "redis_sigkill",
    "redis_lost_writes",
    "transient_failure",
    "slow_handler",
    "crash_once",
    "poison_job",
    "hung_handler",
    "replay",
    "key_eviction",
    "worker_freeze",
    "worker_freeze_in_tx",
    "queue_pause",
    "rate_limit",
)


@pytest.mark.chaos
@pytest.mark.timeout(300)
def test_chaos_with_everysec_loses_no_order_and_applies_no_effect_twice(
    chaos_env: dict[str, str], data_dir: Path, tmp_path: Path
) -> None:
    # the dashboard check below replays what this run's /metrics showed while it ran
    port = free_port()
    scraper = Scraper(f"http://127.0.0.1:{port}/metrics", every=2.0)
    scraper.start()
    code, report, stderr = run_chaos(
        chaos_env,
        data_dir,
        "--metrics-port", str(port),
        "--orders", "800",
        "--rate", "20",
        "--workers-per-step", "2",
        "--kill-every", "4",
        "--term-every", "8",
        "--redis-kill-every", "10",
        "--appendfsync", "everysec",
        "--fail-rate", "0.3",
        "--fail-steps", "notification,return_stock,reverse_points,cancel_shipment",
        "--cancel", "10",
        # Points and the hung stock runs are rate-based, and only the runs inside the
        # fault window count: under evictions and kills that can be a few dozen stock
        # runs, so the rates are high enough that "never happened" cannot be chance.
        # the stock freezes and hangs can hold back the later steps for most of the
        # window: a run saw a dozen points runs in it, where 12 % left a quarter of
        # such runs without a stall
        "--slow-rate", "0.25",
        "--slow-ms", "4000",
        "--slow-steps", "points",
        "--hang-rate", "0.1",
        "--freeze-every", "6",
        # per unit of work: on PostgreSQL a stock batch holds more orders, so fewer
        # units of work run in the window; a high rate keeps "never happened" from chance
        "--freeze-in-tx-rate", "0.25",
        "--lease", "2",
        "--crash-once", "logistics",
        "--replay-every", "2",
        "--evict-every", "7",
        # the pauses fall on logistics, not on points, whose few runs the stall needs
        "--pause", "logistics",
        "--seed", "7",
    )  # fmt: skip

    assert report["findings"] == [], stderr[-3000:]
    assert code == 0 and report["ok"] is True
    happened = fault_counts(report)
    assert all(happened[kind] > 0 for kind in EVERY_FAULT), happened
    orders, delivery = report["orders"], report["delivery"]
    assert orders["placed"] == 800 and orders["unsettled"] == 0
    settled = orders["completed"] + orders["out_of_stock"] + orders["cancelled"]
    assert settled + orders["blocked_in_dlq"] == 800
    # stock runs first: an out-of-stock order's other three steps are skipped (ADR 0011)
    assert orders["out_of_stock"] > 0
    # cancelled in flight: their finished steps compensated under the same faults (ADR 0012)
    assert 0 < orders["cancelled"] <= 10
    done = 4 * (800 - orders["cancelled"]) - 3 * orders["out_of_stock"]
    assert done <= delivery["distinct_effects"] <= done + 7 * orders["cancelled"]
    # what the faults forced the system to do, and it did
    assert delivery["duplicates_absorbed"] > 0  # replays, redeliveries after kills and stalls
    assert delivery["stale_acks_refused"] > 0  # the stalled runs' acks came too late
    assert delivery["reaped"] > 0
    assert delivery["retries"] > 0
    assert delivery["republished_by_sweep"] > 0  # steps the cut AOF tail had lost
    assert report["redis"]["restarts"] == report["redis"]["kills"] >= 1
    assert report["redis"]["aof_bytes_lost"] > 0
    assert report["workers"]["graceful_exits"] >= 1
    # fair under failure: the poison job alone was dead-lettered as worker_lost (then
    # redriven once the fault stopped), and the hung runs failed as timed_out. The
    # findings hold no other worker_lost job; the count is one dead-lettering in the
    # writes Redis kept. A crash whose cut AOF tail held the poison job's
    # dead-lettering rolls the job back to its expired lease and the next reap
    # dead-letters it again: the report adds the lost increment back, so the total
    # is one more per such cut, and no more.
    lost_dead = delivery["dead_lettered_worker_lost_restored"]
    assert delivery["dead_lettered_worker_lost"] - lost_dead == 1
    assert 0 <= lost_dead <= report["redis"]["aof_cuts"]
    assert orders["redriven"] >= 1
    assert delivery["timed_out"] >= 1
    check_dashboard_and_alerts(scraper.stop(), tmp_path)


def check_dashboard_and_alerts(scrapes: list[tuple[float, str]], folder: Path) -> None:
    """Every panel expression of deploy/grafana returns data from the run's scrapes, and
    every metric a panel or an alert rule names was scraped (``tests/metrics_replay``)."""
    if shutil.which("promtool") is None or shutil.which("prometheus") is None:
        if os.environ.get("CI"):
            pytest.fail("promtool / prometheus missing: apt-get install prometheus (.ci/run)")
        pytest.skip("promtool / prometheus missing (apt-get install prometheus)")
    assert len(scrapes) >= 10, f"only {len(scrapes)} scrape(s) of the run's /metrics"
    started = time.monotonic()
    data = create_blocks(openmetrics_history(scrapes), folder)
    panels = dashboard_expressions(DEPLOY / "grafana" / "orderflow.json")
    alerts = alert_expressions(DEPLOY / "prometheus" / "alerts.yml")
    start, end = scrapes[0][0], scrapes[-1][0]
    with local_prometheus(data) as base:
        found = problems(base, start, end, panels, alerts)
        # the check itself can fail: an unknown metric and a selector matching nothing
        canaries = problems(
            base, start, end, [("canary", 'orderflow_orders{status="lost"} + orderflow_nope')]
        )
    assert found == [], "\n".join(found)
    assert canaries == [
        "canary: unknown metric(s) orderflow_nope",
        'canary: empty result for orderflow_orders{status="lost"} + orderflow_nope',
    ]
    assert len(panels) >= 30 and len(alerts) >= 14
    print(f"dashboard check: {len(scrapes)} scrapes, {time.monotonic() - started:.1f}s")


@pytest.mark.chaos
@pytest.mark.timeout(240)
def test_with_appendfsync_always_a_redis_crash_loses_nothing_to_republish(
    chaos_env: dict[str, str], data_dir: Path
) -> None:
    code, report, stderr = run_chaos(
        chaos_env,
        data_dir,
        "--orders", "200",
        "--rate", "20",
        "--workers-per-step", "1",
        "--kill-every", "0",
        "--term-every", "0",
        "--redis-kill-every", "4",
        "--appendfsync", "always",
        "--cancel", "0",
        "--fail-rate", "0",
        "--slow-rate", "0",
        "--crash-once", "",
        "--poison", "",
        "--hang", "",
        "--replay-every", "0",
        "--evict-every", "0",
        "--freeze-every", "0",
        "--freeze-in-tx-rate", "0",
        "--seed", "3",
    )  # fmt: skip

    assert report["findings"] == [], stderr[-3000:]
    assert code == 0
    assert fault_counts(report)["redis_sigkill"] >= 2
    assert fault_counts(report)["redis_lost_writes"] == 0  # off with always
    assert report["redis"]["aof_bytes_lost"] == 0
    # Every acknowledged write was fsynced: the sweep finds nothing lost. (Steps whose
    # publish failed while Redis was down are published by it, which is not a loss.)
    assert report["delivery"]["republished_by_sweep"] == 0
    assert report["orders"]["completed"] + report["orders"]["out_of_stock"] == 200
