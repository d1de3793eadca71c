"""The chaos experiment (``orders chaos``): kill workers and Redis while orders flow, then judge.

``driver`` runs one experiment; ``setup`` gives it its options and services;
``pool`` keeps the worker processes it kills; ``redis_crash`` kills and
restarts the embedded Redis; ``actions`` places orders and replays jobs;
``observe`` looks at queues and counters; ``summary`` turns what was measured
into a ``report`` and a verdict. It may import ``orders.domain``,
``orders.sources``, ``orders.app`` and ``orders.worker``, never an interface
(``orders.cli`` calls it) nor ``orders.demo``.
"""
