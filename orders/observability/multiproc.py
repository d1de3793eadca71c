"""The Prometheus multi-process folder: where worker processes write their metrics.

prometheus-client's multi-process mode keeps each process's counters and
histograms in memory-mapped files of one folder; any process can then serve the
sum over all of them. orderflow puts that folder in the data dir, one per queue
prefix, so every worker process of one data dir adds to the same figures and
``orders web`` / ``orders watch`` / ``orders worker --metrics-port`` read them.
"""

from __future__ import annotations

import os
from pathlib import Path

from orders.settings import Settings

ENV = "PROMETHEUS_MULTIPROC_DIR"


def metrics_dir(settings: Settings) -> Path:
    """Return ``<data dir>/metrics/<queue prefix>`` (absolute; not created)."""
    return settings.resolved_data_dir() / "metrics" / settings.queue_prefix


def enable_multiprocess(path: Path) -> Path:
    """Make metrics created from now on in this process write into ``path``.

    Sets ``PROMETHEUS_MULTIPROC_DIR`` (inherited by child processes) and
    switches prometheus-client's value class, so it works even when the
    library was imported before. Call it before creating any metric.

    Args:
        path: the folder (created if missing).

    Returns:
        ``path`` as given.

    Raises:
        OSError: the folder cannot be created.
    """
    from prometheus_client import values

    path.mkdir(parents=True, exist_ok=True)
    os.environ[ENV] = str(path)
    if values.ValueClass is values.MutexValue:
        values.ValueClass = values.MultiProcessValue()
    return path


def has_samples(path: Path) -> bool:
    """True when some process has written metrics into ``path``."""
    return path.is_dir() and any(path.glob("*.db"))
