"""The demo run (``orders demo``): TPC-H orders through the four steps, end to end.

``driver`` starts one worker process per step, injects transient and a few
permanent failures, places the orders, waits for quiescence and reports what
happened with the invariant checks. It may import ``orders.domain``,
``orders.sources``, ``orders.app`` and ``orders.worker``, never an interface
(``orders.cli`` calls it) nor ``orders.chaos``.
"""
