"""Files the application creates are its owner's alone.

The data dir holds customers, orders and the queue's append-only file. Every
``orders`` process sets the umask 077 at start (:func:`restrict_umask`), so each
file it, SQLite, the metrics library or its Redis child creates is 0600 and each
directory 0700. The data dir itself is created 0700; one that already exists
with wider permissions is kept (it may be shared on purpose) but warned about.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger("orders.app")

PRIVATE_UMASK = 0o077


def restrict_umask() -> int:
    """Set the process umask to 077; return the previous one (tests restore it)."""
    return os.umask(PRIVATE_UMASK)


def private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) with mode 0700; warn if it already exists
    with group or other access.

    Args:
        path: the directory (the data dir).

    Returns:
        Path: ``path``.

    Raises:
        OSError: the directory cannot be created.
    """
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    current = stat.S_IMODE(path.stat().st_mode)
    if current & 0o077:
        log.warning(
            "data dir %s is open to other users (mode %o): they may read orders, customers "
            "and the queue's data; run `chmod 700 %s` unless it is shared on purpose",
            path,
            current,
            path,
        )
    return path
