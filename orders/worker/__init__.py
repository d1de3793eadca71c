"""The worker side: a process that runs order steps from the queues, and its helpers.

``runner`` (one worker process: queue worker, fault injection, outbox sweep),
``tasks`` (registry entries wiring queue jobs to the domain's handlers),
``faults`` (injected failures read from Redis, applied around each handler),
``relay_loop`` (the periodic outbox sweep thread), ``counters`` (run counters
in one Redis hash), ``reconcile`` (step rows brought in line with the DLQs),
``binding`` (a worker serves its namespace only while it is bound to its database),
``procs`` (starting and stopping ``orders worker`` processes) and ``defaults``
(the default batch size and lanes of ``orders worker``). It may
import ``orders.domain``, ``orders.app``, ``orders.observability`` (a worker
serves its own ``/metrics``), ``workflows`` and ``reliable_queue``; never
``orders.cli``, ``orders.web`` or an experiment.
"""
