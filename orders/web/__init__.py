"""``orders web``: a small server-rendered dashboard (Starlette + Jinja2, no build step).

Pages: overview (queues, throughput chart, orders, outbox backlog), one queue
(jobs by state, explain one job), one order (its steps as a timeline), the
dead-letter queues (filter, show, redrive with a dry run, purge with a
confirmation), search with bulk actions, the audit log, and ``/metrics``; the
HTTP API under ``/api/v1`` lives in ``web.api`` and is served by the same
application. Reading is open to loopback clients; every action that changes
state needs a token whose role allows it (``ORDERS_WEB_TOKEN`` or a named one)
and passes a CSRF check (see ``security``). It may import ``orders.domain``,
``orders.app`` and ``orders.observability``; only ``orders.cli`` imports it.
"""
