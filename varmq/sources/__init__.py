"""Bound queues as the engine sees them: the only worker-side code that touches storage.

- :mod:`~varmq.sources.base`: :class:`~varmq.sources.base.Source`, the interface the engine
  calls without knowing a queue's kind, and :class:`~varmq.sources.base.Step`;
- :mod:`~varmq.sources.memory` (with :mod:`~varmq.sources.memory_queues`,
  :mod:`~varmq.sources.memory_records` and :mod:`~varmq.sources.taken`): in-memory queues;
- :mod:`~varmq.sources.storage` and :mod:`~varmq.sources.leases`: adapter storage, and a taken
  job's lease from the take to the acknowledgement;
- :mod:`~varmq.sources.topic`: a worker's topic subscription.

A source never knows the runner that runs its jobs or the handle that adds them.
"""
