"""The order domain: what an order is and what each of its four steps does.

``models`` (tables; ``access``: tokens, orders placed over HTTP, the audit log),
``steps`` (the workflow's steps and their queue and task names), ``errors`` (the
``OrdersError`` tree), ``effects`` and ``compensations`` (each step's idempotent
effect, set-based over a batch of orders; one order is a batch of one),
``handlers`` (an effect, the steps' completion and the workflows' progress in one
unit of work), ``queries`` (read-only status), ``search`` (the one search filter),
``text`` (the rule for client text that reaches the database: no NUL) and
``invariants`` (the promises checked from the database alone: used by the demo,
the chaos run and the tests). It may import ``workflows`` and SQLAlchemy, never
``reliable_queue`` (it knows no Redis) nor any other package of ``orders``.
"""
