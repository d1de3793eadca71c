"""The chaos experiment (``orders chaos``): kill workers and Redis while orders flow, then judge.

``driver`` runs one experiment; ``setup`` gives it its options and services;
``pool`` keeps the worker processes it kills; ``redis_crash`` kills and
restarts the embedded Redis; ``actions`` places orders and replays jobs;
``observe`` looks at queues and counters; ``summary`` turns what was measured
into a ``report`` and a verdict. Nothing else in orders imports this package
except the CLI; it may import the rest of the application below the
interfaces, never ``orders.cli``, ``orders.web`` or ``orders.observability``.
"""
