"""The defaults of ``orders worker``, in one place.

The CLI, ``run_worker`` / ``build_worker`` and the end-to-end benchmark's
``default`` rows all read these, so changing the default worker is a one-line
change here.
"""

from __future__ import annotations

BATCH_SIZE = 1
"""Jobs leased per fetch per lane. Above 1, a fetched batch of a step is handled in
one database transaction (``orders.worker.tasks.make_batch_handler``)."""

CONCURRENCY = 2
"""Lanes (threads) per step served by one ``orders worker`` process."""
