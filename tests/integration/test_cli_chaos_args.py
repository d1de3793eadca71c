"""``orders chaos`` refuses bad options at once, before starting anything."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

# What this checks does not depend on the database: the PostgreSQL pass skips it.
pytestmark = pytest.mark.no_database


def orders_command() -> list[str]:
    script = Path(sys.executable).with_name("orders")
    return [str(script)] if script.exists() else [sys.executable, "-m", "orders.cli.main"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fail-steps", "shipping"], "unknown step"),
        (["--crash-once", "billing"], "unknown step"),
        (["--poison", "billing"], "unknown step"),
        (["--hang", "billing"], "unknown step"),
        (["--hang-ms", "2000", "--time-limit", "3"], "outlast the time limit"),
        (["--appendfsync", "no"], "everysec or always"),
        (["--source", "nowhere"], "tpch or random"),
        (["--fail-rate", "2"], "fail-rate"),
        (["--freeze-steps", "billing"], "unknown step"),
        (["--freeze-seconds", "1.5", "--lease", "2"], "outlast the lease"),
        (["--freeze-in-tx-rate", "1.5"], "freeze-in-tx-rate"),
        (["--metrics-port", "9400", "--metrics-host", "no such host"], "is not an address"),
        (["--pause", "billing"], "unknown step"),
        (["--pause-seconds", "8", "--pause-every", "8"], "end before the next"),
        (["--limit-step", "billing"], "unknown step"),
        (["--limit", "0/s"], "rate limit"),
        (["--limit", "abc"], "rate limit"),
    ],
)
def test_bad_chaos_options_exit_nonzero_with_a_clear_message(
    cli_env: dict[str, str], tmp_path: Path, args: list[str], message: str
) -> None:
    proc = subprocess.run(
        [*orders_command(), "chaos", "--data-dir", str(tmp_path / "run"), *args],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert message in proc.stdout + proc.stderr
    assert not (tmp_path / "run").exists()  # nothing was started


def test_chaos_is_listed_in_the_help(cli_env: dict[str, str]) -> None:
    proc = subprocess.run(
        [*orders_command(), "chaos", "--help"],
        env=dict(cli_env, COLUMNS="200"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0
    assert "--redis-kill-every" in proc.stdout and "--appendfsync" in proc.stdout
    assert "--poison" in proc.stdout and "--time-limit" in proc.stdout


def test_a_metrics_port_in_use_is_refused_before_anything_starts(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [*orders_command(), "chaos", "--data-dir", str(tmp_path / "run"),
             "--metrics-port", str(port)],
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=60,
        )  # fmt: skip
    assert proc.returncode == 2
    assert f"cannot serve /metrics on 127.0.0.1:{port}" in proc.stderr
    assert not (tmp_path / "run").exists()
