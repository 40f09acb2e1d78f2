"""A topic subscription bound to a worker, as the engine sees it: :class:`TopicSource` (its
handle, what ``worker.bind_topic`` returns, is :class:`~varmq.api.topic_queue.TopicQueue`).

The source is a third kind of :class:`~varmq.sources.base.Source`, beside in-memory queues and
storage queues: its storage is a subscriber's bounded buffer
(:class:`~varmq.topics.subscription.Subscriber`), filled by ``publish`` instead of ``add``. Each
message taken becomes a :class:`TopicJob`. Everything after the take is an in-memory queue's:
the worker's concurrency, retries (a retried job waits in the source's delayed jobs, then
outside the buffer, so a retry never counts against ``max_pending`` and is never dropped),
dead letters, metrics, pause and stop. Only the buffer is the topic's: while the worker is
paused or stopped, messages wait there, and when it is full the subscriber's ``on_full`` decides.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from ..contract.protocols import QueueStats
from ..model.jobs import Job, TopicJob
from ..topics.subscription import Subscriber
from .base import SourceSettings
from .memory import MemorySource

__all__ = ["TopicSource"]

T = TypeVar("T")


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
        settings: SourceSettings,
        *,
        signal: Callable[[int], None],
        count_dropped: Callable[[int], None],
        next_id: Callable[[], str],
        poison_limit: int,
    ) -> None:
        """``signal(n)`` tells the worker that ``n`` jobs came (0: look again);
        ``count_dropped(n)`` counts messages the buffer dropped (``metrics.dropped``)."""
        super().__init__(storage, settings, poison_limit=poison_limit)
        self.sub = storage
        self.signal = signal
        self._count_dropped = count_dropped
        self._next_id = next_id
        # Jobs whose retry delay is over, waiting for a slot (outside the bounded buffer).
        self.again: deque[Job[Any]] = deque()

    # -- told by the topics (outside its lock) --------------------------------------------

    def copied(self, copies: int, dropped: int) -> None:
        """A publish gave the subscriber ``copies`` messages and made it drop ``dropped``."""
        if dropped:
            self._count_dropped(dropped)
        if copies:
            self.signal(copies)

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
