"""Picking among several bound queues, by the worker's :class:`~varmq.model.strategy.Strategy`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from ..model.strategy import Strategy

__all__ = ["pick"]


class _Candidate(Protocol):
    def ready_locked(self) -> bool: ...

    def length(self) -> int: ...


C = TypeVar("C", bound=_Candidate)


def pick(strategy: Strategy, sources: Sequence[C], cursor: int) -> tuple[C | None, int]:
    """Choose a source that has work; returns it (or ``None``) and the new round-robin cursor.

    ``sources`` are in bind-priority order; a source that is not ready (empty, or backing off
    after an error) is passed over. Length strategies ask each candidate for its
    length, which for storage is a round trip: that is the price of choosing them.
    """
    if strategy is Strategy.ROUND_ROBIN:
        count = len(sources)
        for step in range(1, count + 1):
            index = (cursor + step) % count
            source = sources[index]
            if source.ready_locked():
                return source, index
        return None, cursor
    if strategy is Strategy.MAX_LEN or strategy is Strategy.MIN_LEN:
        best: C | None = None
        best_len = 0
        for source in sources:
            if not source.ready_locked():
                continue
            try:
                size = source.length()
            except Exception:  # a storage that cannot answer has no known length: skip it
                continue
            if size <= 0:
                continue
            if (
                best is None
                or (strategy is Strategy.MAX_LEN and size > best_len)
                or (strategy is Strategy.MIN_LEN and size < best_len)
            ):
                best, best_len = source, size
        return best, cursor
    for source in sources:
        if source.ready_locked():
            return source, cursor
    return None, cursor
