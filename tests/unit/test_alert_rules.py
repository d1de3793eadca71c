"""deploy/prometheus: the alert rules pass their `promtool test rules` unit tests.

promtool comes with Debian's ``prometheus`` package (`.ci/run` installs it when
missing). Without it the test skips, except in CI (``CI`` set), where it fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"

pytestmark = pytest.mark.no_database


def promtool() -> str:
    """The promtool binary; skip (fail in CI) when there is none."""
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing: apt-get install prometheus (see .ci/run)")
        pytest.skip("promtool is missing (apt-get install prometheus)")
    return found


def run(*args: str) -> str:
    done = subprocess.run(
        [promtool(), *args], cwd=DEPLOY, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_alert_rules_are_valid_and_pass_their_unit_tests() -> None:
    assert "SUCCESS: 14 rules found" in run("check", "rules", "alerts.yml")
    assert "SUCCESS" in run("test", "rules", "alerts_test.yml")


def test_the_example_prometheus_configuration_is_valid() -> None:
    assert "SUCCESS" in run("check", "config", "prometheus.yml")
