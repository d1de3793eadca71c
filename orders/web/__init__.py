"""``orders web``: a small server-rendered dashboard (Starlette + Jinja2, no build step).

Pages: overview (queues, throughput chart, orders, outbox backlog), one queue
(jobs by state, explain one job), one order (its steps as a timeline), the
dead-letter queues (filter, show, redrive with a dry run, purge with a
confirmation), and ``/metrics``. Reading is open to loopback clients; every
action that changes state needs the token (``ORDERS_WEB_TOKEN``) and passes a
CSRF check (see ``security``). It may import ``orders.domain``, ``orders.app``
and ``orders.observability``; only ``orders.cli`` imports it.
"""
