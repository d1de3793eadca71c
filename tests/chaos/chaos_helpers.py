"""Running ``orders chaos`` as a subprocess and reading its JSON report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any


def orders_command() -> list[str]:
    """The installed console script, or the module when it is missing."""
    script = Path(sys.executable).with_name("orders")
    return [str(script)] if script.exists() else [sys.executable, "-m", "orders.cli.main"]


def run_chaos(
    env: dict[str, str], data_dir: Path, *args: str, timeout: float = 240
) -> tuple[int, dict[str, Any], str]:
    """Run ``orders chaos --json`` with ``args``; return (exit code, report, stderr).

    The command's stdout and stderr are also kept in ``data_dir`` (``chaos-stdout.json``,
    ``chaos-stderr.log``), so a failed run can be read after the test (pytest keeps
    the last few runs' temporary directories).
    """
    proc = subprocess.run(
        [*orders_command(), "chaos", "--json", "--data-dir", str(data_dir), *args],
        env=env,
        cwd=data_dir,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    (data_dir / "chaos-stdout.json").write_text(proc.stdout)
    (data_dir / "chaos-stderr.log").write_text(proc.stderr)
    start = proc.stdout.find("{")
    assert start >= 0, f"no JSON report (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    return proc.returncode, json.loads(proc.stdout[start:]), proc.stderr


def fault_counts(report: dict[str, Any]) -> dict[str, int]:
    """Fault kind -> times it happened."""
    return {f["kind"]: f["count"] for f in report["faults"]}
