"""The dashboard in a real browser (Debian's headless Chromium driven by Playwright),
against a real `orders web` server and a real worker process.

A person opens the overview, places orders from the CLI and sees the counts move;
sees the worker on the workers page; opens an order; signs in, dry-runs and then
redrives a dead-lettered job from the DLQ page and sees its order complete; is refused
the purge of another whose order it blocks, cancels that order instead and sees it
counted as cancelled. A screenshot of each page goes to ``test-output/browser/``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_processes import (
    app_for,
    free_port,
    run_orders,
    start_orders,
    stop,
    wait_for_http,
    wait_until,
)

from orders.app.bootstrap import App
from orders.sources.tpch import load_tpch

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKEN = "browser-test-token"
SHOTS = Path(__file__).resolve().parents[2] / "test-output" / "browser"

pytestmark = pytest.mark.timeout(300)


def require_chromium() -> None:
    if CHROMIUM.exists():
        return
    reason = "Debian's chromium is not installed (apt-get install chromium chromium-driver)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: CI must run the browser tests")
    pytest.skip(reason)


@dataclass
class Dashboard:
    """A running `orders web` + `orders worker --all` on one data dir."""

    url: str
    env: dict[str, str]
    app: App


@pytest.fixture
def dashboard(cli_env: dict[str, str], key_prefix: str, tmp_path: Path) -> Iterator[Dashboard]:
    require_chromium()
    env = dict(
        cli_env,
        ORDERS_QUEUE_PREFIX=key_prefix,
        ORDERS_WEB_TOKEN=TOKEN,
        ORDERS_WEB_SAMPLE_SECONDS="0.5",
    )
    app = app_for(env)
    load_tpch(app.session_factory, app.settings.resolved_data_dir(), scale=0.001)
    port = free_port()
    web_log, worker_log = tmp_path / "web.log", tmp_path / "worker.log"
    web = start_orders(["web", "--port", str(port)], env, web_log)
    worker = start_orders(["worker", "--all", "--concurrency", "1"], env, worker_log)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for_http(f"{url}/healthz", web, web_log)
        yield Dashboard(url, env, app)
    finally:
        stop(worker)
        stop(web)
        app.close()


@pytest.fixture
def page(tmp_path: Path) -> Iterator[object]:
    require_chromium()
    pytest.importorskip("playwright.sync_api", reason="uv sync --group browser")
    from playwright.sync_api import sync_playwright

    if SHOTS.exists():
        shutil.rmtree(SHOTS)
    SHOTS.mkdir(parents=True)
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=str(CHROMIUM),
            headless=True,
            args=FLAGS,
            viewport={"width": 1280, "height": 900},
        )
        try:
            yield context.new_page()
        finally:
            context.close()


def shot(page, name: str) -> None:  # noqa: ANN001 - playwright Page
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def number(page, selector: str) -> int:  # noqa: ANN001
    return int(page.text_content(selector).strip())


def dead_letters(app: App) -> int:
    return sum(q.dead_letters.size() for q in app.queues.values())


def place_one_dead_order(d: Dashboard) -> int:
    """Place one order whose logistics step is dead-lettered; return its id."""
    run_orders(["inject", "logistics", "--fail-rate", "1", "--permanent"], d.env)
    time.sleep(1.2)  # workers re-read injected faults at most once a second
    before = dead_letters(d.app)
    out = run_orders(["place", "--count", "1", "--source", "random", "--json"], d.env)
    (order_id,) = json.loads(out[out.index("{") :])["order_ids"]
    wait_until(lambda: dead_letters(d.app) == before + 1, 30, "the logistics job to die")
    run_orders(["inject", "--clear"], d.env)
    time.sleep(1.2)
    return order_id


def final_status(page, url: str) -> str:  # noqa: ANN001
    holder: list[str] = []

    def settled() -> bool:
        page.goto(url)
        holder[:] = [page.text_content("#order-status").strip()]
        return holder[0] in ("completed", "out_of_stock")

    wait_until(settled, 30, f"{url} to show a finished order", every=0.5)
    return holder[0]


def test_an_operator_watches_orders_flow_and_redrives_a_dead_letter(
    dashboard: Dashboard,
    page,  # noqa: ANN001
) -> None:
    from playwright.sync_api import expect

    d = dashboard
    # the overview, then orders placed from the CLI show up without a reload
    page.goto(d.url + "/")
    expect(page.locator("#orders-placed")).to_have_text("0")
    shot(page, "overview-empty")
    run_orders(["place", "--count", "8", "--source", "random"], d.env)
    expect(page.locator("#orders-placed")).to_have_text("8", timeout=20_000)
    expect(page.locator("#orders-in-progress")).to_have_text("0", timeout=30_000)
    assert number(page, "#orders-completed") + number(page, "#orders-out-of-stock") == 8
    expect(page.locator("#queue-stock")).to_be_visible()
    expect(page.locator("#orders-cancelled")).to_have_text("0")
    expect(page.locator("#workers-running")).to_have_text("1")
    page.wait_for_timeout(1500)  # let the throughput chart draw a few samples
    shot(page, "overview")

    # the workers page: the one worker process, serving every step
    page.click("text=Workers")
    expect(page.locator("#worker-1-state")).to_have_text("running")
    expect(page.locator("#workers tbody tr")).to_have_count(1)
    shot(page, "workers")

    # open an order from the overview's newest-orders list
    page.goto(d.url + "/")
    page.locator("#recent-orders a").first.click()
    expect(page.locator("#order-status")).to_have_text(re.compile("completed|out_of_stock"))
    expect(page.locator("#step-logistics")).to_be_visible()
    shot(page, "order")

    # a queue page and one job explained
    page.goto(d.url + "/queues/stock")
    expect(page.locator("#count-done")).to_have_text("8")
    shot(page, "queue")
    page.locator("#jobs-done a").first.click()
    expect(page.locator("#job-state")).to_have_text("done")
    shot(page, "job")

    # a dead letter: the DLQ page, sign in, dry run, redrive, the order completes
    order_id = place_one_dead_order(d)
    page.goto(d.url + "/dlq")
    expect(page.locator("#dead-letters tbody tr")).to_have_count(1)
    shot(page, "dlq")
    page.get_by_role("link", name="Sign in").first.click()
    page.fill("#token", TOKEN)
    shot(page, "login")
    page.click("#sign-in")
    expect(page).to_have_url(d.url + "/dlq")
    page.locator("#dead-letters input[type=checkbox]").first.check()
    page.click("#redrive-selected-dry")
    expect(page.locator("#redrive-result")).to_contain_text("Would redrive 1")
    assert dead_letters(d.app) == 1
    shot(page, "redrive-dry-run")
    page.click("#redrive-now")
    expect(page.locator("#redrive-result")).to_contain_text("Redrove 1")
    shot(page, "redrive")
    assert final_status(page, f"{d.url}/orders/{order_id}") in ("completed", "out_of_stock")
    expect(page.locator("#blocked")).to_have_count(0)
    shot(page, "order-after-redrive")
    assert dead_letters(d.app) == 0

    # another dead letter: its order is blocked on it, so the purge page refuses it
    # and says the way out (redrive it, or cancel the order)
    blocked_id = place_one_dead_order(d)
    page.goto(d.url + "/dlq")
    row = page.locator("#dead-letters tbody tr").first
    row.locator("a").last.click()
    expect(page.locator("#reason")).to_have_text("error")
    shot(page, "dead-letter")
    page.click("#purge")
    expect(page.locator("#purge-blocking")).to_contain_text(f"order {blocked_id}")
    expect(page.locator("#purge-question")).to_contain_text("nothing to purge")
    shot(page, "purge-refused")
    assert dead_letters(d.app) == 1

    # cancelled instead: its skipped step draws no run, and its end is not "completed"
    run_orders(["cancel", str(blocked_id)], d.env)

    def undone() -> bool:  # its compensations ran: the order's workflow finished
        page.goto(f"{d.url}/orders/{blocked_id}")
        return "cancellation finished" in page.text_content("#order-end")

    wait_until(undone, 30, "the cancelled order's compensations", every=0.5)
    expect(page.locator("#step-logistics .run")).to_have_count(0)
    expect(page.locator("#step-return_stock .run")).to_have_count(1)
    shot(page, "order-cancelled")
    page.goto(d.url + "/")
    expect(page.locator("#orders-cancelled")).to_have_text("1")
