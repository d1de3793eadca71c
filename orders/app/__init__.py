"""The application built from settings, and the use case that writes orders.

``settings`` (every ``ORDERS_*`` variable), ``db`` (engines, sessions, unit of
work), ``migrate`` (the Alembic history, run once however many processes
start), ``bootstrap`` (the one place that builds an ``App``: database, Redis,
queues, publisher), ``placement`` (orders, their workflow and step rows in
one transaction, then the relay publishes; ``commit_outcome`` asks the
database whether a batch whose connection dropped committed; ``api_orders``, one
order over HTTP with its idempotency key), ``tokens`` and ``audit`` (API tokens and
the operator audit log), ``bulk`` (cancel or redrive what a search finds), ``order_traces``
(starts each order's trace), ``pacing``
(placement at a target rate) and ``run_lock`` (one demo or chaos run per data
dir). It may import ``orders.domain``, ``orders.sources``,
``workflows`` and ``reliable_queue``, and of the interfaces only the leaf
``orders.observability.urls`` (to mask credentials in an error message).
"""
