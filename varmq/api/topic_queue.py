"""A worker's topic subscription as users hold it: :class:`TopicQueue`, what ``worker.bind_topic``
returns.

The subscription is a subscriber of the topics (:mod:`varmq.topics`) whose messages the worker
runs as jobs: as the engine sees it, a :class:`~varmq.sources.topic.TopicSource`
(:meth:`varmq.api.binder.Binder.topic` makes it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic

from typing_extensions import TypeVar

from ..model.jobs import TopicJob
from ..model.retry import DeadLetter
from ..topics.subscription import SubscriberView

if TYPE_CHECKING:
    from ..sources.topic import TopicSource
    from ..topics.topics import Topics

__all__ = ["TopicQueue"]

T = TypeVar("T")
W = TypeVar("W", default=Any)
"""The worker that runs the subscription's jobs (``handle.worker``)."""


class TopicQueue(SubscriberView, Generic[T, W]):
    """What ``worker.bind_topic`` returns: the worker's subscription to a topics object, as a
    bound queue that publishes fill (it has no ``add``).

    ``len()`` counts the messages waiting for the worker (buffered, and retries due);
    :meth:`stats` gives the subscriber's counts, :attr:`dropped` what its buffer dropped,
    :meth:`unsubscribe` stops new messages (those buffered still run). Dead letters (with a
    retry policy) are listed, requeued and purged as on any in-memory queue.
    """

    def __init__(self, topics: Topics, source: TopicSource, worker: W) -> None:
        super().__init__(source.sub)
        self._topics = topics
        self._source = source
        self._worker = worker

    @property
    def worker(self) -> W:
        """The worker that runs a job per message."""
        return self._worker

    @property
    def topics(self) -> Topics:
        """The topics object it subscribed to."""
        return self._topics

    def __len__(self) -> int:
        """Messages waiting for the worker: buffered, and retries whose delay is over."""
        return self._source.length()

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """Jobs that ran out of attempts (with a retry policy), oldest first."""
        return self._source.dead.letters(limit)

    def requeue_dead(self, keys: Sequence[str] | None = None) -> int:
        """Run dead letters again, from attempt 1 (all when ``keys`` is ``None``); how many."""
        source = self._source
        jobs = source.dead.take(None if keys is None else set(keys))
        for old in jobs:
            source.offer(TopicJob(old.id, old.data, old.topic, old.message_id))
        if jobs:
            source.signal(0)
        return len(jobs)

    def purge_dead(self) -> int:
        """Forget every dead letter; how many there were."""
        return len(self._source.dead.take(None))

    def __repr__(self) -> str:
        return f"<TopicQueue {self.name!r} on {self.pattern!r}, {len(self)} waiting>"
