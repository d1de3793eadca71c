"""The libraries the harness knows, by name (imported lazily: peers need the bench group)."""

from __future__ import annotations

import importlib

from .peers.base import Peer

MODULES = {
    "orderflow": "benchmarks.peers.orderflow",
    "rq": "benchmarks.peers.rq_peer",
    "dramatiq": "benchmarks.peers.dramatiq_peer",
    "celery": "benchmarks.peers.celery_peer",
    "arq": "benchmarks.peers.arq_peer",
    "saq": "benchmarks.peers.saq_peer",
    "huey": "benchmarks.peers.huey_peer",
    "taskiq": "benchmarks.peers.taskiq_peer",
}


def load(name: str) -> Peer:
    """The :class:`Peer` named ``name``.

    Raises:
        KeyError: an unknown name.
        ImportError: the library is not installed (run with ``--group bench``).
    """
    return importlib.import_module(MODULES[name]).PEER  # type: ignore[no-any-return]
