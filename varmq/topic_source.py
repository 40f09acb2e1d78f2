"""A topic subscription bound to a worker: ``worker.bind_topic`` builds a :class:`TopicSource`
for the dispatcher and returns a :class:`TopicQueue` handle.

The source is a third kind of :class:`~varmq.sources.Source`, beside in-memory queues and
storage queues: its storage is a subscriber's bounded buffer
(:class:`~varmq.subscription.Subscriber`), filled by ``publish`` instead of ``add``. Each
message taken becomes a :class:`TopicJob`. Everything after the take is an in-memory queue's:
the worker's concurrency, retries (a retried job waits in the source's delayed jobs, then
outside the buffer, so a retry never counts against ``max_pending`` and is never dropped),
dead letters, metrics, pause and stop. Only the buffer is the topic's: while the worker is
paused or stopped, messages wait there, and when it is full the subscriber's ``on_full`` decides.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .contract.protocols import QueueStats
from .contract.topic_names import OnFull
from .job import Job
from .retry import DeadLetter
from .sources import MemorySource
from .subscription import Subscriber, SubscriberView
from .topics import Topics

if TYPE_CHECKING:
    from .binding import Binder
    from .dispatch import Dispatcher
    from .worker import BaseWorker

__all__ = ["TopicJob", "TopicQueue", "TopicSource", "bind_topic"]

T = TypeVar("T")


class TopicJob(Job[T]):
    """What the job function of a ``bind_topic`` worker receives: a :class:`~varmq.Job` whose
    ``data`` is the message's, with the ``topic`` name it was published to and its
    ``message_id``. Its ``id`` is the message id (or, without one, the worker's next job id).
    """

    __slots__ = ("message_id", "topic")

    #: A failed run goes back to its source for another attempt (with a retry policy).
    _retryable = True

    def __init__(self, job_id: str, data: T, topic: str, message_id: str | None) -> None:
        super().__init__(job_id, data)
        self.topic = topic
        self.message_id = message_id


class TopicSource(MemorySource):
    """The dispatcher's view of one ``bind_topic`` subscription.

    Taking pops the subscriber's buffer (atomic, so it needs no lock of the topics); jobs back
    from a delay (retries) wait in ``again`` and are taken first. It subclasses
    :class:`MemorySource` for what happens after a run, which is the same: the jobs are this
    process's objects.
    """

    storage_label = "topic"

    def __init__(
        self,
        storage: Subscriber,
        *,
        dispatch: Dispatcher,
        next_id: Callable[[], str],
        **options: Any,
    ) -> None:
        super().__init__(storage, **options)
        self.sub = storage
        self._dispatch = dispatch
        self._next_id = next_id
        # Jobs whose retry delay is over, waiting for a slot (outside the bounded buffer).
        self.again: deque[Job[Any]] = deque()

    # -- told by the topics (outside its lock) --------------------------------------------

    def copied(self, copies: int, dropped: int) -> None:
        """A publish gave the subscriber ``copies`` messages and made it drop ``dropped``."""
        dispatch = self._dispatch
        if dropped:
            with dispatch.lock:
                dispatch.metrics.dropped += dropped
        if copies:
            dispatch.signal(copies)

    # -- selection (under the dispatcher's lock) -----------------------------------------

    def ready_locked(self) -> bool:
        return bool(self.again) or bool(self.sub.items)

    def take_now(self) -> Job[Any] | None:
        """The next job: a retry whose delay is over, else the oldest buffered message."""
        if self.again:
            job = self.again.popleft()
        else:
            message = self.sub.pop()
            if message is None:
                return None
            name, data, message_id = message
            job = TopicJob(message_id or self._next_id(), data, name, message_id)
        self.running += 1
        return job

    def offer(self, job: Any) -> bool:
        """A job back from its retry delay (or requeued from the dead letters) waits here."""
        self.again.append(job)
        return True

    def length(self) -> int:
        return len(self.sub.items) + len(self.again)

    def waiting(self) -> int:
        return self.length() + len(self.delayed)

    # -- operators -----------------------------------------------------------------------

    def stats(self) -> QueueStats:
        return {
            "waiting": self.length(),
            "in_flight": self.running,
            "delayed": len(self.delayed),
            "dead": len(self.dead),
            "oldest_age": 0.0,
        }

    def describe(self, now: float | None = None) -> dict[str, Any]:
        row = super().describe(now)
        row["pattern"] = self.sub.pattern
        row["dropped"] = self.sub.dropped
        return row


class TopicQueue(SubscriberView, Generic[T]):
    """What ``worker.bind_topic`` returns: the worker's subscription to a topics object, as a
    bound queue that publishes fill (it has no ``add``).

    ``len()`` counts the messages waiting for the worker (buffered, and retries due);
    :meth:`stats` gives the subscriber's counts, :attr:`dropped` what its buffer dropped,
    :meth:`unsubscribe` stops new messages (those buffered still run). Dead letters (with a
    retry policy) are listed, requeued and purged as on any in-memory queue.
    """

    def __init__(
        self,
        topics: Topics,
        source: TopicSource,
        worker: BaseWorker[Any, Any, Any],
    ) -> None:
        super().__init__(source.sub)
        self._topics = topics
        self._source = source
        self._worker = worker

    @property
    def worker(self) -> BaseWorker[Any, Any, Any]:
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
            source._dispatch.signal(0)
        return len(jobs)

    def purge_dead(self) -> int:
        """Forget every dead letter; how many there were."""
        return len(self._source.dead.take(None))

    def __repr__(self) -> str:
        return f"<TopicQueue {self.name!r} on {self.pattern!r}, {len(self)} waiting>"


def bind_topic(
    binder: Binder[Any, Any],
    topics: Topics,
    pattern: str,
    *,
    max_pending: int,
    on_full: OnFull,
    block_timeout: float | None,
    name: str | None,
    priority: int | None,
) -> TopicQueue[Any]:
    """Subscribe a worker to ``topics`` (see ``MemoryBinding.bind_topic``)."""
    if not isinstance(topics, Topics):
        raise TypeError(
            f"varmq: bind_topic needs the Topics of varmq.new_topics(), got "
            f"{type(topics).__name__}; to consume a storage topic, bind a queue of that "
            "storage to it (topics.bind(pattern, queue_name)) and bind that queue to the worker"
        )
    sub = topics._new_subscriber(
        pattern, max_pending, on_full, block_timeout, name or f"topic:{pattern}"
    )
    dispatch = binder.producer.dispatch
    assert dispatch is not None
    source = binder.add_source(
        TopicSource,
        sub,
        priority=priority,
        name=sub.name,
        dispatch=dispatch,
        next_id=binder.producer.next_id,
    )
    sub.sink = source.copied
    topics._add_subscriber(sub)  # only now: the routes it joins know its sink
    return TopicQueue(topics, source, binder.jobs.worker)
