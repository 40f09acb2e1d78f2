"""What both halves of the conformance suite share: the harness, queue kinds, timings, helpers.

Private to ``varmq.testing``: ``conformance`` re-exports the public names (``StorageHarness``,
``QueueKind``), and ``conformance_retries`` uses the rest. Needs pytest.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Protocol

import pytest

LEASE = 0.5
"""Visibility timeout of the queues in lease tests, in seconds."""
LONG_LEASE = 60.0
"""Visibility timeout where a test does not want leases to expire, however slow the storage."""
WAIT = 5.0
"""Longest wait for something another thread or process does."""
DELAY = 0.5
"""Delay of delayed enqueues and nacks in the retry tests, in seconds."""


class StorageHarness(Protocol):
    """What a storage gives the suite: queues, passing time, and cleanup."""

    def new_queue(
        self, name: str, *, priority: bool, distributed: bool, visibility_timeout: float
    ) -> Any:
        """Open queue ``name`` of the given kind; the same name twice shares the jobs.

        A storage that claims ``IDeadLetterable`` also accepts the keywords
        ``dead_letter_limit`` and ``dead_letter_max_age`` here and passes them to its queue.
        """
        ...

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` of lease time pass (fake clock, or a real sleep)."""
        ...

    def close(self) -> None:
        """Close everything this harness opened."""
        ...


@dataclass(frozen=True)
class QueueKind:
    """One of the four kinds of queue a storage offers."""

    priority: bool
    distributed: bool

    def __str__(self) -> str:
        return ("distributed_" if self.distributed else "") + (
            "priority_queue" if self.priority else "queue"
        )


FIFO_KINDS = (QueueKind(False, False), QueueKind(False, True))
PRIORITY_KINDS = (QueueKind(True, False), QueueKind(True, True))
DISTRIBUTED_KINDS = (QueueKind(False, True), QueueKind(True, True))
ALL_KINDS = (*FIFO_KINDS, *PRIORITY_KINDS)


def kinds(of: tuple[QueueKind, ...]) -> pytest.MarkDecorator:
    """Run the decorated test once per kind in ``of``."""
    return pytest.mark.parametrize("kind", of, ids=str)


def fresh_name() -> str:
    """A queue name no other test, run or process uses."""
    return f"conformance-{uuid.uuid4().hex}"


def put(q: Any, kind: QueueKind, item: Any, priority: int = 0) -> bool:
    """Enqueue through the shape of ``enqueue`` that ``kind`` has."""
    return bool(q.enqueue(item, priority) if kind.priority else q.enqueue(item))


def take(q: Any) -> bytes | None:
    """Take one job with a lease and return its payload only."""
    taken = q.dequeue_with_ack_id()
    return None if taken is None else taken[0]


def drain(q: Any) -> list[bytes]:
    """Take (and acknowledge) everything ready, in take order."""
    items = []
    while (taken := q.dequeue_with_ack_id()) is not None:
        items.append(taken[0])
        assert q.acknowledge(taken[1])
    return items
