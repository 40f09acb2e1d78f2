"""A rate limit's window for in-memory queues: the starts of the last ``seconds``, on the
monotonic clock. (Storage queues keep theirs in the store: ``varmq.contract.protocols``, "Rate
limits".) No lock of its own: its source holds the dispatcher's lock around every call.
"""

from __future__ import annotations

from collections import deque

__all__ = ["StartWindow"]


class StartWindow:
    """At most ``count`` starts in any window of ``seconds``."""

    __slots__ = ("_starts", "count", "seconds")

    def __init__(self, count: int, seconds: float) -> None:
        self.count = count
        self.seconds = seconds
        self._starts: deque[float] = deque()

    def left(self, now: float) -> int:
        """How many jobs may start at ``now``."""
        starts, edge = self._starts, now - self.seconds
        while starts and starts[0] <= edge:
            starts.popleft()
        return self.count - len(starts)

    def opens(self, now: float) -> float:
        """When the window lets another job start (``now`` if it may start now)."""
        if self.left(now) > 0:
            return now
        return self._starts[0] + self.seconds

    def started(self, now: float) -> None:
        """A job started at ``now``."""
        self._starts.append(now)

    def used(self, now: float) -> int:
        """Starts in the window at ``now``; changes nothing, so an operator's thread may ask
        without the lock (it reads a copy)."""
        edge = now - self.seconds
        return sum(1 for at in tuple(self._starts) if at > edge)
