"""Structured logs: JSON lines with the job's fields, readable lines, no passwords."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator

import pytest

from orders.observability.logs import configure_logging, job_log_context
from reliable_queue import JobContext


def ctx(attempt: int = 2) -> JobContext:
    return JobContext(
        job_id="job-1",
        queue="points",
        task="orders.points",
        attempt=attempt,
        max_attempts=5,
        lease_token="7:w",
        fencing_token=7,
        enqueued_at=0.0,
        idempotency_key="3:points",
    )


class Payload:
    order_id = 42


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()
    configure_logging("INFO", stream=stream)
    yield stream
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in saved[0]:
        root.addHandler(handler)
    root.setLevel(saved[1])


def lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_line_logged_inside_a_job_carries_job_task_attempt_and_order(
    captured: io.StringIO,
) -> None:
    log = logging.getLogger("orders.test")

    def handler() -> str:
        log.info("charging points")
        return "ok"

    # a lane thread, as in the worker
    thread = threading.Thread(target=lambda: job_log_context(ctx(), Payload(), handler))
    thread.start()
    thread.join()
    (line,) = lines(captured)
    assert line["msg"] == "charging points"
    assert line["level"] == "INFO" and line["logger"] == "orders.test"
    assert (line["job_id"], line["queue"], line["task"], line["attempt"], line["order_id"]) == (
        "job-1",
        "points",
        "orders.points",
        2,
        42,
    )
    assert line["ts"].endswith("+00:00")


def test_the_workers_outcome_line_after_the_job_gets_task_and_order(
    captured: io.StringIO,
) -> None:
    log = logging.getLogger("reliable_queue.worker")

    def lane() -> None:
        job_log_context(ctx(), {"order_id": 9}, lambda: None)
        log.warning("job dead", extra={"job_id": "job-1", "queue": "points", "attempt": 2})
        log.info("idle")  # not about the job: no job fields

    thread = threading.Thread(target=lane)
    thread.start()
    thread.join()
    dead, idle = lines(captured)
    assert dead["task"] == "orders.points" and dead["order_id"] == 9
    assert "job_id" not in idle and "order_id" not in idle


def test_passwords_in_urls_never_reach_the_log(captured: io.StringIO) -> None:
    log = logging.getLogger("orders.test")
    log.error("cannot reach redis://:hunter2@cache:6379/0")
    try:
        raise RuntimeError("postgresql://app:topsecret@db/orders refused")
    except RuntimeError:
        log.exception("database down")
    text = captured.getvalue()
    assert "hunter2" not in text and "topsecret" not in text
    assert "redis://:***@cache:6379/0" in text


def test_readable_lines_for_a_terminal_carry_the_fields_too() -> None:
    stream = io.StringIO()
    handler = configure_logging("INFO", stream=stream, json_lines=False)
    try:
        logging.getLogger("orders.test").info(
            "retrying redis://u:pw@h/0", extra={"job_id": "j9", "attempt": 3}
        )
    finally:
        logging.getLogger().removeHandler(handler)
    line = stream.getvalue().strip()
    assert "INFO" in line and "orders.test: retrying redis://u:***@h/0" in line
    assert "job_id=j9" in line and "attempt=3" in line
    assert not line.startswith("{")


HOSTILE = "boom [red]x\x1b[31mRED\x07 \x9b2J \u202egnp.exe 注文"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


def test_hostile_job_text_reaches_a_json_log_escaped_but_intact(captured: io.StringIO) -> None:
    logging.getLogger("orders.test").warning("job dead: %s", HOSTILE, extra={"order_id": HOSTILE})
    text = captured.getvalue()
    assert not any(raw in text for raw in RAW), text
    (line,) = lines(captured)
    assert line["msg"] == f"job dead: {HOSTILE}" and line["order_id"] == HOSTILE
    assert "注文" in text  # readable text stays readable


def test_hostile_job_text_reaches_a_terminal_log_as_visible_escapes() -> None:
    stream = io.StringIO()
    handler = configure_logging("INFO", stream=stream, json_lines=False)
    try:
        log = logging.getLogger("orders.test")
        log.warning("job dead: %s", HOSTILE, extra={"order_id": HOSTILE})
        try:
            raise ValueError(HOSTILE)
        except ValueError:
            log.exception("handler failed")
    finally:
        logging.getLogger().removeHandler(handler)
    text = stream.getvalue()
    assert not any(raw in text for raw in RAW), text
    assert "x\\x1b[31mRED\\x07 \\x9b2J \\u202egnp.exe 注文" in text
    assert "order_id=boom [red]x\\x1b" in text
    assert "\nTraceback" in text  # a traceback keeps its lines
