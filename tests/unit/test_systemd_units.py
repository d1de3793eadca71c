"""deploy/systemd: the worker's unit and its /livez check are valid systemd units.

Checked with ``systemd-analyze verify`` where it is installed (skipped elsewhere).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[2] / "deploy" / "systemd"

pytestmark = pytest.mark.no_database


def verify(*units: Path) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed")
    return subprocess.run(
        [tool, "verify", *map(str, units)], capture_output=True, text=True, timeout=60
    )


def test_the_worker_units_verify() -> None:
    units = sorted(UNITS.glob("orders-worker*"))
    assert [u.name for u in units] == [
        "orders-worker-livez.service",
        "orders-worker-livez.timer",
        "orders-worker.service",
    ]
    done = verify(*units)
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr


def test_verify_refuses_a_broken_unit(tmp_path: Path) -> None:
    broken = tmp_path / "orders-worker.service"
    text = (UNITS / "orders-worker.service").read_text()
    broken.write_text(text.replace("ExecStart=/usr/bin/env", "ExecStart=usr/bin/env"))
    assert verify(broken).returncode != 0
