"""Operators' view of orderflow: Prometheus metrics, structured logs, live samples.

Modules, one job each:

- ``urls``: mask credentials in URLs and in any text that may hold one.
- ``logs``: JSON or readable log lines carrying the job and order being worked on.
- ``multiproc``: the Prometheus multi-process folder under the data dir.
- ``worker_metrics``: what worker processes record (handler time, latency, ...).
- ``collectors``: gauges and counters read from Redis and the database, cached.
- ``registry``: the registry a ``/metrics`` endpoint serves.
- ``sampler``: recent samples of the queues for rates (watch, web charts).
- ``histograms``: quantiles from the workers' recorded histograms.
- ``snapshot``: one look at the whole system for the live views.
"""
