"""What users hold: workers, their queue and job handles, job records, schedules, snapshots.

- :mod:`~varmq.api.worker`: the worker classes, their options, workers by name;
- :mod:`~varmq.api.binding` and :mod:`~varmq.api.binder`: ``bind_*``/``with_*``;
- :mod:`~varmq.api.queues`, :mod:`~varmq.api.storage_queues`, :mod:`~varmq.api.topic_queue`
  (sharing :mod:`~varmq.api.handles`): the handles a bind returns;
- :mod:`~varmq.api.records`: following a job by id;
- :mod:`~varmq.api.schedules`, :mod:`~varmq.api.snapshots` (and its file format),
  :mod:`~varmq.api.callables`.

The names users import are re-exported by :mod:`varmq`.
"""
