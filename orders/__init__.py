"""orderflow's application: orders placed, fanned out to four steps, and watched.

Packages, lowest first (each package's docstring says what it may import;
``tests/unit/test_import_layering.py`` holds them to it):

- ``domain``: tables, steps, effects, handlers, status queries, invariants.
- ``sources``: the TPC-H data set and random orders, as drafts to place.
- ``app``: settings, database, migrations, the ``App`` built from them, placement.
- ``observability``: Prometheus metrics, structured logs, live samples.
- ``worker``: the worker process: tasks, injected faults, outbox sweep, counters.
- ``web``: the dashboard.
- ``demo`` and ``chaos``: the two runs that drive the whole system end to end.
- ``cli``: the ``orders`` command, the only package that imports every other.

``orders`` imports ``workflows`` and ``reliable_queue``; neither imports it.
"""
