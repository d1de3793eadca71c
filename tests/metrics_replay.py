"""Scrape a /metrics endpoint during a run, replay it in a local Prometheus, evaluate PromQL.

The dashboard check (``tests/chaos/test_chaos_run.py``) uses it: :class:`Scraper`
takes OpenMetrics scrapes of a live run, :func:`openmetrics_history` stamps and
merges them into one OpenMetrics text, ``promtool tsdb create-blocks-from
openmetrics`` turns that into TSDB blocks, and :class:`LocalPrometheus` serves them
on a loopback port, where :func:`problems` evaluates every panel and alert
expression. Debian's ``prometheus`` package ships both binaries.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

OPENMETRICS = "application/openmetrics-text; version=1.0.0"
RATE_INTERVAL = "1m"
"""What Grafana's ``$__rate_interval`` stands for here: four 15 s scrapes' worth."""
METRIC_NAME = re.compile(r"\borderflow_[a-z0-9_]+\b")


class Scraper(threading.Thread):
    """GETs ``url`` as OpenMetrics every ``every`` seconds until :meth:`stop`.

    A scrape that fails (the endpoint not up yet, or gone) is skipped.

    Attributes:
        scrapes: ``(epoch seconds, OpenMetrics text)`` of every scrape that answered.
    """

    def __init__(self, url: str, every: float = 1.0) -> None:
        super().__init__(name="scraper", daemon=True)
        self.url = url
        self.every = every
        self.scrapes: list[tuple[float, str]] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            at = time.time()
            request = urllib.request.Request(self.url, headers={"Accept": OPENMETRICS})
            try:
                with urllib.request.urlopen(request, timeout=10) as reply:
                    self.scrapes.append((at, reply.read().decode()))
            except (OSError, urllib.error.URLError):
                pass
            self._halt.wait(max(self.every - (time.time() - at), 0.0))

    def stop(self) -> list[tuple[float, str]]:
        """Stop scraping; return the scrapes."""
        self._halt.set()
        self.join(30)
        return self.scrapes


def openmetrics_history(scrapes: Sequence[tuple[float, str]]) -> str:
    """One OpenMetrics text holding every sample of ``scrapes``, stamped with its time.

    Each family's metadata is written once, then its samples scrape by scrape, so
    every series is in time order (as the backfill needs).
    """
    meta: dict[str, list[str]] = {}
    samples: dict[str, list[str]] = {}
    for at, text in sorted(scrapes, key=lambda s: s[0]):
        family = None
        for line in text.splitlines():
            if line == "# EOF":
                break
            if line.startswith("# "):
                kind, family = line.split(" ", 3)[1:3]
                lines = meta.setdefault(family, [])
                samples.setdefault(family, [])
                if not any(seen.split(" ", 3)[1] == kind for seen in lines):
                    lines.append(line)
            elif line:
                assert family is not None and " # " not in line, line  # no exemplars
                samples[family].append(f"{line} {at:.3f}")
    out = [line for family in meta for line in (*meta[family], *samples[family])]
    return "\n".join([*out, "# EOF", ""])


def create_blocks(history: str, folder: Path) -> Path:
    """Backfill ``history`` into TSDB blocks in ``folder/data``; return that path.

    Raises:
        AssertionError: promtool refused the text (its output says why).
    """
    source = folder / "scrapes.om"
    source.write_text(history)
    data = folder / "data"
    done = subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return data


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def local_prometheus(data: Path) -> Iterator[str]:
    """A ``prometheus`` server on a free loopback port over the blocks in ``data``
    (no scrape target); yields its base URL and stops it afterwards."""
    config = data.parent / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1h\n")
    port = _free_port()
    log = (data.parent / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=30d",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None, (data.parent / "prometheus.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "prometheus did not become ready in 30 s"
            time.sleep(0.2)
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def _get(base: str, path: str, **params: Any) -> Any:
    url = f"{base}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=30) as reply:
        body = json.loads(reply.read())
    assert body["status"] == "success", body
    return body["data"]


def dashboard_expressions(path: Path) -> list[tuple[str, str]]:
    """``(panel title, expression)`` of every target of every panel (rows included),
    ``$__rate_interval`` read as :data:`RATE_INTERVAL`.

    Raises:
        AssertionError: a panel other than a row has no expression.
    """
    found: list[tuple[str, str]] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            if panel.get("type") == "row":
                walk(panel.get("panels", []))
                continue
            exprs = [t.get("expr", "") for t in panel.get("targets", [])]
            assert exprs and all(exprs), f"panel {panel.get('title')!r} has no expression"
            for expr in exprs:
                found.append((panel["title"], expr.replace("$__rate_interval", RATE_INTERVAL)))

    walk(json.loads(path.read_text())["panels"])
    return found


def alert_expressions(path: Path) -> list[tuple[str, str]]:
    """``(alert name, expression)`` of every rule of a Prometheus rules file."""
    rules = yaml.safe_load(path.read_text())
    return [(r["alert"], r["expr"]) for g in rules["groups"] for r in g["rules"]]


def problems(
    base: str,
    start: float,
    end: float,
    must_answer: Sequence[tuple[str, str]],
    names_only: Sequence[tuple[str, str]] = (),
) -> list[str]:
    """What is wrong with the expressions, evaluated on the server at ``base``.

    Args:
        base: the Prometheus server.
        start / end: the time range the data covers, epoch seconds.
        must_answer: ``(what, expression)`` that must return data at some point of the
            range (a range query, 5 s steps), and name only metrics the data holds.
        names_only: ``(what, expression)`` that must name only metrics the data holds
            (alert rules: empty while nothing fires).

    Returns:
        One line per problem: a metric no scrape had, an expression Prometheus
        refused, or one that returned nothing.
    """
    known = set(_get(base, "/api/v1/label/__name__/values"))
    out: list[str] = []
    for what, expr in [*must_answer, *names_only]:
        unknown = sorted(set(METRIC_NAME.findall(expr)) - known)
        if unknown:
            out.append(f"{what}: unknown metric(s) {', '.join(unknown)}")
    for what, expr in must_answer:
        try:
            data = _get(base, "/api/v1/query_range", query=expr, start=start, end=end, step=5)
        except urllib.error.HTTPError as exc:
            out.append(f"{what}: refused ({exc.code}): {exc.read().decode()[:300]}")
            continue
        if not any(series["values"] for series in data["result"]):
            out.append(f"{what}: empty result for {expr}")
    return out
