"""A real run, scraped: the counters on a worker's /metrics agree with what the run did."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import pytest
from cli_processes import (
    app_for,
    free_port,
    http_get,
    start_orders,
    stop,
    wait_for_http,
    wait_until,
)
from prometheus_client.parser import text_string_to_metric_families

from orders.app.bootstrap import App
from orders.app.pacing import place_paced
from orders.domain.queries import totals
from orders.domain.steps import STEPS, task_name
from orders.observability.order_counts import order_counts
from orders.sources.tpch import load_tpch
from orders.worker.faults import FaultConfig, FaultStore
from reliable_queue import stats


class Scrape:
    """Samples of one scrape, looked up by name and labels."""

    def __init__(self, text: str) -> None:
        self.samples: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                self.samples[s.name].append((s.labels, s.value))

    def value(self, name: str, **labels: str) -> float:
        """The one sample of ``name`` with exactly these labels (plus any others summed)."""
        found = [
            v for ls, v in self.samples[name] if all(ls.get(k) == w for k, w in labels.items())
        ]
        assert found, f"no sample {name}{labels}"
        return sum(found)

    def total(self, name: str, **labels: str) -> float:
        """Like :meth:`value`, but 0 when no sample matches (a counter never bumped)."""
        return sum(
            v for ls, v in self.samples[name] if all(ls.get(k) == w for k, w in labels.items())
        )


def settled(app: App, placed: int) -> bool:
    with app.session_factory() as session:
        counts = order_counts(session)
    queues_busy = any(
        s.ready + s.delayed + s.active for s in (stats(q) for q in app.queues.values())
    )
    return counts.placed == placed and counts.in_progress == 0 and not queues_busy


@pytest.mark.timeout(240)
def test_scraped_counters_match_the_run(
    cli_env: dict[str, str], key_prefix: str, tmp_path: Path
) -> None:
    env = dict(cli_env, ORDERS_QUEUE_PREFIX=key_prefix)
    app = app_for(env)
    load_tpch(app.session_factory, app.settings.resolved_data_dir(), scale=0.001)
    faults = FaultStore(app.redis, key_prefix)
    port = free_port()
    log = tmp_path / "worker.log"
    worker = start_orders(
        ["worker", "--all", "--concurrency", "1", "--metrics-port", str(port)], env, log
    )
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        wait_for_http(url, worker, log)
        # 10 orders with transient failures on points, then 5 whose logistics step dies
        faults.set("points", FaultConfig(fail_rate=0.5))
        place_paced(app, 10, source="random")
        wait_until(lambda: settled(app, 10), 90, "the first 10 orders to settle")
        faults.clear()
        faults.set("logistics", FaultConfig(fail_rate=1.0, permanent=True))
        time.sleep(1.2)  # workers re-read the faults at most once a second
        place_paced(app, 5, source="random")
        wait_until(lambda: settled(app, 15), 60, "the next 5 orders to block")
        # three finished stock jobs delivered again: the handler must absorb them
        stock = app.queues["stock"]
        replayed, _ = stock.replay(stock.ids_in("done", 0, 2))
        assert len(replayed) == 3
        wait_until(
            lambda: stats(stock).counters["succeeded"] == 18 and settled(app, 15),
            30,
            "the replayed jobs to be acked",
        )
        # the endpoint caches its Redis and database readings for a few seconds
        # (each source on its own clock), so scrape until both show the settled run
        scrapes: list[Scrape] = []

        def scraped_settled() -> bool:
            scrapes.append(Scrape(http_get(url)))
            s = scrapes[-1]
            return (
                s.value("orderflow_jobs_succeeded_total", queue="stock") == 18
                and s.value("orderflow_orders_placed") == 15
                and s.value("orderflow_orders", status="in_progress") == 0
            )

        wait_until(scraped_settled, 20, "the scrape to show the settled run")
        scrape = scrapes[-1]
        with app.session_factory() as session:
            t = totals(session)
        dlq = {s: app.queues[s].dead_letters.size() for s in STEPS}
    finally:
        code = stop(worker)
        app.close()
    assert code == 0, log.read_text()[-3000:]

    for step in STEPS:
        q = {"queue": step, "task": task_name(step)}
        done = t.steps_by_state[step]["done"]
        duplicates = scrape.value("orderflow_duplicates_absorbed_total", **q)
        succeeded = scrape.value("orderflow_jobs_succeeded_total", **q)
        dead = scrape.value("orderflow_jobs_dead_lettered_total", **q)
        failed = scrape.total("orderflow_jobs_failed_total", **q)
        # every ack is a step done, or a redelivery absorbed without a second effect
        assert succeeded == done + duplicates, step
        assert scrape.value("orderflow_jobs_enqueued_total", **q) == 15
        # the DLQ holds exactly what was dead-lettered
        assert dead == dlq[step] == scrape.value("orderflow_queue_jobs", state="dead", **q)
        # every handler run ended in an ack, a retry or a dead letter
        assert scrape.value("orderflow_job_handler_seconds_count", **q) == succeeded + failed
        if step == "points":
            assert failed == scrape.value("orderflow_jobs_retried_total", **q) + dead
            assert failed == scrape.total(
                "orderflow_jobs_failed_total", error="InjectedFailure", **q
            )
        assert scrape.value("orderflow_job_start_latency_seconds_count", **q) >= 15
    assert scrape.value("orderflow_duplicates_absorbed_total", queue="stock") == 3
    assert scrape.value("orderflow_jobs_succeeded_total", queue="logistics") == 10
    assert (
        scrape.value("orderflow_jobs_dead_lettered_total", queue="logistics", reason="error") == 5
    )
    assert (
        scrape.value("orderflow_jobs_failed_total", queue="logistics", error="PermanentError") == 5
    )
    completed = t.orders_by_status.get("completed", 0)
    blocked = t.orders_by_status.get("blocked", 0)
    assert blocked >= 5 and completed + blocked + t.orders_by_status.get("out_of_stock", 0) == 15
    assert scrape.value("orderflow_orders", status="completed") == completed
    assert scrape.value("orderflow_orders", status="blocked") == blocked
    assert scrape.value("orderflow_orders", status="in_progress") == 0
    assert scrape.value("orderflow_orders_placed") == 15
    assert scrape.value("orderflow_order_completion_seconds_count") == completed
    assert scrape.value("orderflow_outbox_backlog") == 0
    assert scrape.value("orderflow_outbox_unpublishable") == 0
    assert scrape.value("orderflow_redis_up") == scrape.value("orderflow_database_up") == 1
