"""The defaults of ``orders worker``, in one place.

The CLI, ``run_worker`` / ``build_worker`` and the end-to-end benchmark's
``default`` rows all read these, so changing the default worker is a one-line
change here.
"""

from __future__ import annotations

BATCH_SIZE = 50
"""Jobs leased per fetch per lane. A fetched batch of a step is handled in one
database transaction (``orders.worker.tasks.make_handler``; one job is a batch of one).

50 because it is the fast path: on TPC-H end to end (2,000 orders, SQLite) the
workers spent 116 CPU seconds at batch 1, 32 at 10 and 18 at 50. A batch is safe
to share: a job that fails is settled alone, a job lost with its worker is charged
only when it ran alone, and a batch whose handler call times out is split
uncharged (docs/reliability.md). What it costs: a hung job holds its batch-mates
for one time limit before they are handed back; ``--batch-size 1`` suits steps
that can run long."""

CONCURRENCY = 2
"""Lanes (threads) per step served by one ``orders worker`` process."""
