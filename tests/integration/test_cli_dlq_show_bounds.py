"""``orders dlq show`` of a dead letter with a huge payload prints a bounded part of it,
says how much it left out and how to see all of it."""

from __future__ import annotations

import json
import subprocess

import pytest
from cli_processes import app_for, orders_command

from reliable_queue.codec import encode_record

BIG = 20 * 1024 * 1024  # bytes of payload text


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*orders_command(), *args], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def env(cli_env: dict[str, str], key_prefix: str) -> dict[str, str]:
    """The CLI's environment: database migrated, Redis running (built in-process: fast)."""
    env = dict(cli_env, ORDERS_QUEUE_PREFIX=key_prefix, COLUMNS="100")
    app_for(env, migrate=True).close()
    return env


def dead_letter_with_payload(env: dict[str, str], job_id: str, blob: str) -> None:
    """A dead letter on points whose payload holds ``blob``, stored straight into Redis
    (a producer that ignores the enqueue size limit)."""
    app = app_for(env, migrate=True)
    try:
        queue = app.queues["points"]
        record = encode_record("orders.points", {"order_id": 7, "blob": blob}, 0, 5, None)
        queue.client.hset(queue.keys.key("jobs"), job_id, record)
        queue.client.rpush(queue.keys.key("ready"), job_id)
        leased = queue.fetch(1).jobs[0]
        assert queue.dead(leased.lease, "error", error="PermanentError: too big")
    finally:
        app.close()


def test_dlq_show_of_a_20_mb_payload_prints_a_few_kb_and_says_how_to_see_all(
    env: dict[str, str],
) -> None:
    dead_letter_with_payload(env, "huge-payload-job", "x" * BIG)
    shown = run(env, "dlq", "show", "huge-payload-job")
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert len(shown.stdout) < 16 * 1024, len(shown.stdout)
    assert "PermanentError: too big" in shown.stdout and '"order_id": 7' in shown.stdout
    note = " ".join(shown.stdout.split())
    assert "bytes more; use --json or --full to see all" in note, shown.stdout[-600:]
    # the note counts what the whole payload's JSON lost, not a second cut's leftover
    whole_json = json.dumps({"order_id": 7, "blob": "x" * BIG}, indent=2)
    left_out = int(note.split(" bytes more")[0].rsplit("(", 1)[1])
    assert len(whole_json) - 4096 <= left_out <= len(whole_json) - 4000, left_out
    whole = run(env, "dlq", "show", "huge-payload-job", "--json")
    assert whole.returncode == 0 and len(json.loads(whole.stdout)["payload"]["blob"]) == BIG


def test_dlq_show_full_prints_a_large_payload_whole(env: dict[str, str]) -> None:
    blob = "".join(f"{i:08d}" for i in range(2000))  # 16 KB: over the bound
    dead_letter_with_payload(env, "large-payload-job", blob)
    cut = run(env, "dlq", "show", "large-payload-job")
    assert cut.returncode == 0 and "--full" in cut.stdout and "00001999" not in cut.stdout
    full = run(env, "dlq", "show", "large-payload-job", "--full")
    assert full.returncode == 0, full.stderr[-2000:]
    assert "00001999" in "".join(full.stdout.split()) and "bytes more" not in full.stdout
