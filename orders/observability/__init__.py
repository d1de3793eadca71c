"""Operators' view of orderflow: Prometheus metrics, structured logs, live samples.

Modules, one job each (see docs/operations.md for what an operator sees):

- ``urls``: mask credentials in URLs and in any text that may hold one.
- ``visible``: control and bidi characters of untrusted text shown as escapes.
- ``labels``: metric label values bounded to a known set (else ``unknown``).
- ``logs``: JSON or readable log lines carrying the job and order being worked on.
- ``multiproc``: the Prometheus multi-process folder under the data dir.
- ``worker_metrics``: what worker processes record (handler time, latency, ...).
- ``worker_setup``: a worker process's middleware, hooks and its server of
  ``/metrics``, ``/livez`` and ``/readyz``.
- ``worker_gauges``: a worker process's lanes and memory, sampled into live gauges.
- ``worker_files``: the multi-process folder as served (gauges of running processes only).
- ``liveness``: is a worker alive (its lanes and heartbeat), ``/livez``.
- ``readiness``: do Redis and the database answer, ``/readyz``.
- ``order_counts``: orders by status and the outbox backlog from indexed columns.
- ``cache``: a value recomputed at most once per time-to-live.
- ``collectors``: gauges and counters read from Redis and the database, cached.
- ``registry``: the registry a ``/metrics`` endpoint serves.
- ``sampler``: recent samples of the queues for rates (watch, web charts).
- ``histograms``: quantiles from the workers' recorded histograms.
- ``recent_dead``: the newest dead letters across queues.
- ``snapshot``: one look at the whole system for the live views.
- ``workers``: the worker processes' published states, read for the views.
- ``tracing``: this process's tracer provider from ``ORDERS_TRACES`` / ``OTEL_*``.
- ``trace_files``: the local span files (bounded OTLP/JSON lines) and their reader.
- ``trace_view``: an order's spans laid out as a tree on a time axis.

It may import ``orders.domain`` and ``orders.app``; the worker, the dashboard
and the CLI import it. ``urls`` imports nothing of orders, so that
``orders.app`` may use it too.
"""
