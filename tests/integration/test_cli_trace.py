"""``orders trace`` and the order page's trace, from the spans the real console script wrote."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import orjson
import pytest
from cli_processes import app_for, orders_command
from starlette.testclient import TestClient

from orders.app.placement import place_orders
from orders.observability.trace_files import traces_dir
from orders.web.app import create_app
from orders.web.settings import WebSettings
from workflows.uow import UnitOfWork


@pytest.fixture
def env(cli_env, database_url, redis_url, key_prefix, catalog) -> dict[str, str]:
    """The CLI on this test's database and Redis keys, writing spans into its data dir."""
    return dict(
        cli_env,
        ORDERS_DATABASE_URL=database_url,
        ORDERS_REDIS_URL=redis_url,
        ORDERS_QUEUE_PREFIX=key_prefix,
        ORDERS_TRACES="local",
    )


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*orders_command(), *args], env=env, capture_output=True, text=True, timeout=120
    )


def _hostile_span(env: dict[str, str], trace_id: str, at_ns: int) -> None:
    """A span file line another writer could have left: control characters and markup."""
    line = {
        "resourceSpans": [
            {
                "resource": {"attributes": []},
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": trace_id,
                                "spanId": "00000000000000aa",
                                "name": "\x1b[2Jevil <b>b</b> [red]m",
                                "startTimeUnixNano": str(at_ns),
                                "endTimeUnixNano": str(at_ns + 1000),
                                "status": {"code": 2, "message": "\x07<script>x</script>"},
                            }
                        ]
                    }
                ],
            }
        ]
    }
    folder = traces_dir(Path(env["ORDERS_DATA_DIR"]).resolve())
    with open(folder / "spans-1-1-1.jsonl", "ab") as out:
        out.write(b"not json at all\n" + orjson.dumps(line) + b"\n")


@pytest.mark.slow
def test_an_orders_trace_is_a_tree_in_the_terminal_and_on_its_page(env, tmp_path) -> None:
    done = run(env, "place", "-n", "1", "--source", "random", "--json")
    assert done.returncode == 0, done.stderr
    [order_id] = json.loads(done.stdout)["order_ids"]
    as_json = json.loads(run(env, "trace", str(order_id), "--json").stdout)
    [root] = [s for s in as_json["spans"] if s["name"] == "place order"]
    assert root["attributes"]["orders.order_id"] == order_id and root["parent_id"] is None
    [send] = [s for s in as_json["spans"] if s["name"] == "send stock"]
    assert send["parent_id"] == root["span_id"] and send["trace_id"] == as_json["trace_ids"][0]
    [relay] = [s for s in as_json["spans"] if s["name"] == "relay publish"]
    assert {"trace_id": root["trace_id"], "span_id": root["span_id"]} in relay["links"]
    assert relay["linked"] is True and relay["parent_id"] is None

    _hostile_span(env, root["trace_id"], root["start_unix_ns"] + 10)
    shown = run(env, "trace", str(order_id))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith(f"order {order_id}: trace {root['trace_id']}")
    names = [line.strip().split("  ")[0] for line in lines[3:]]
    assert names[:2] == ["place order", "└ send stock"] and "⇢ relay publish" in names
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout  # escaped, not sent
    assert "\\x1b[2Jevil <b>b</b> [red]m" in names  # shown as text, never as markup
    assert "\\x07<script>" in shown.stdout

    app = app_for(env)
    web = create_app(app, WebSettings(token=None, sample_seconds=0.2), multiproc=tmp_path / "m")
    with TestClient(web, base_url="http://127.0.0.1:8080", client=("127.0.0.1", 5000)) as client:
        page = client.get(f"/orders/{order_id}")
        app.close()
    assert page.status_code == 200 and 'id="trace"' in page.text
    assert ">place order<" in page.text and "send stock" in page.text
    assert "<b>b</b>" not in page.text and "&lt;b&gt;b&lt;/b&gt;" in page.text
    assert "<script>x</script>" not in page.text


@pytest.mark.slow
def test_an_order_placed_with_tracing_off_has_no_trace_and_says_so(env, make_draft) -> None:
    app = app_for(env)
    try:  # tracing off in this process: no provider, no caller's span
        with UnitOfWork(app.session_factory) as uow:
            [placed] = place_orders(uow.session, [make_draft()])
            uow.commit()
    finally:
        app.close()
    shown = run(env, "trace", str(placed.order_id))
    assert shown.returncode == 1 and shown.stdout == ""
    assert "placed with tracing off" in shown.stderr
