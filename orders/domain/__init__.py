"""The order domain: what an order is and what each of its four steps does.

``models`` (tables), ``steps`` (the workflow's steps and their queue and task
names), ``errors`` (the ``OrdersError`` tree), ``effects`` and
``batch_effects`` (each step's idempotent effect, for one order or a batch),
``handlers`` (an effect, the step's completion and the workflow's progress in
one unit of work), ``queries`` (read-only status) and ``invariants`` (the
promises checked from the database alone: used by the demo, the chaos run and
the tests). It may import ``workflows`` and SQLAlchemy, never
``reliable_queue`` (it knows no Redis) nor any other package of ``orders``.
"""
