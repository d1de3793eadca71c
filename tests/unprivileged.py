"""Run a command as an unprivileged user (``nobody``) to check what another local user
can reach. Needs root and ``setpriv`` (util-linux); tests skip otherwise."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

NOBODY_UID = 65534


def require_setpriv() -> str:
    """The ``setpriv`` executable; skips the test when it cannot switch users."""
    setpriv = shutil.which("setpriv")
    if setpriv is None or os.geteuid() != 0:
        pytest.skip("needs root and setpriv to act as another local user")
    return setpriv


def as_nobody(argv: Sequence[str], timeout: float = 10.0) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as uid/gid 65534 with no supplementary groups; output captured."""
    setpriv = require_setpriv()
    cmd = [setpriv, f"--reuid={NOBODY_UID}", f"--regid={NOBODY_UID}", "--clear-groups", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def world_traversable_dir() -> Path:
    """A fresh directory under /tmp that every user may enter (0755), so that only the
    modes of what the application creates inside it stand between ``nobody`` and the
    data. The caller removes it."""
    path = Path(tempfile.mkdtemp(prefix="orderflow-access-", dir="/tmp"))
    path.chmod(0o755)
    return path
