"""Generic fan-out / fan-in on the queue: workflow and step records, outbox, relay, tracker.

A workflow is a subject (an order, say) with one step record per step.
``outbox`` writes them in the caller's transaction; ``relay`` publishes
undispatched steps to the queue (right after commit, and in a periodic sweep);
``tracker`` records the completion of a batch of step deliveries (one delivery
is a batch of one) in the same unit of work (``uow``) as their effect and marks
a workflow done when every step is.
It may import ``reliable_queue``, never ``orders``: it names no domain step.
"""
