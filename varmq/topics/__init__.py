"""In-memory topics: one publish, a copy for every subscriber and bound queue whose pattern
matches. Knows no worker: a bound queue is anything with ``add``, a worker's subscription is a
subscriber with a sink (:mod:`varmq.sources.topic`).

- :mod:`~varmq.topics.topics`: :class:`~varmq.topics.topics.Topics`, publishing, bindings,
  message-id dedup;
- :mod:`~varmq.topics.fanout`: the fan-out of one publish under the topics' lock;
- :mod:`~varmq.topics.subscription`: a subscriber's bounded buffer and its iterators.
"""
