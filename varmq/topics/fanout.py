"""The fan-out of one publish to the subscribers of a topic name, under the topics' lock.

A :class:`Route` holds what a name reaches: its subscribers and bound queues, worked out once
by :class:`~varmq.topics.topics.Topics` and kept until a subscriber or binding changes. To keep a
publish cheap, a route splits its subscribers in two:

- *unchecked* ones, known to have room: a publish appends to each without looking, one call
  per subscriber. This holds while the topics' publish count stays at or below
  :attr:`Route.until`, since one publish adds at most one message to any buffer;
- *checked* ones, whose buffer was near full at the last look: each publish looks at each of
  them and applies its ``on_full`` policy (:func:`deliver_checked`).

So a stuck subscriber costs each publish one look at that subscriber, not a look at all of
them. :meth:`Route.refresh` looks again when the count passes ``until``. No waiting and no
I/O here: what must happen outside the lock (telling workers, waiting for room) is returned.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

from .subscription import Raw, Subscriber

__all__ = ["NO_LIMIT", "Later", "Route", "deliver_checked"]

NO_LIMIT = sys.maxsize
"""The ``until`` of a route without unchecked subscribers: it never needs a look."""


class Route:
    """The recipients of one name. Guarded by the owning topics' lock.

    ``fast`` counts the publishes whose appends went to the unchecked subscribers since the
    split last changed (their ``received`` is counted here, not per subscriber).
    """

    __slots__ = (
        "appends",
        "bound",
        "checked",
        "fast",
        "fast_sinks",
        "plain",
        "size",
        "subs",
        "unchecked",
        "until",
    )

    def __init__(self, subs: tuple[Subscriber, ...], bound: tuple[Any, ...]) -> None:
        self.subs = subs
        self.bound = bound
        self.fast = 0
        self.until = 0  # the first publish looks
        self._split((), subs)

    def _split(self, unchecked: tuple[Subscriber, ...], checked: tuple[Subscriber, ...]) -> None:
        self.unchecked = unchecked
        self.checked = checked
        self.appends = tuple(sub.items.append for sub in unchecked)
        self.size = len(unchecked)
        self.fast_sinks = tuple(sub.sink for sub in unchecked if sub.sink is not None)
        # Nothing to do but the appends: nobody to check, no worker to tell, no queue to fill.
        self.plain = not checked and not self.fast_sinks and not self.bound

    def refresh(self, count: int) -> None:
        """Look at every buffer before publish number ``count``: subscribers with more than a
        quarter of their buffer free go unchecked until the count passes :attr:`until`."""
        unchecked: list[Subscriber] = []
        checked: list[Subscriber] = []
        room = NO_LIMIT
        for sub in self.subs:
            left = sub.max_pending - len(sub.items)
            if left > sub.max_pending // 4:
                unchecked.append(sub)
                room = min(room, left)
            else:
                checked.append(sub)
        self.until = NO_LIMIT if room == NO_LIMIT else count + room - 1
        if tuple(unchecked) != self.unchecked:
            self.fold()
            self._split(tuple(unchecked), tuple(checked))

    def fold(self) -> None:
        """Count the fast publishes in each unchecked subscriber's ``received``."""
        if self.fast:
            for sub in self.unchecked:
                sub.received += self.fast
            self.fast = 0


class Later:
    """What a publish does after the lock is released, for the subscribers it looked at: the
    ``block`` subscribers that were full, the workers to tell ``(sink, copies, dropped)``, and
    the subscribers whose first drop is to be logged."""

    __slots__ = ("blocked", "told", "warn")

    def __init__(self) -> None:
        self.blocked: list[Subscriber] = []
        self.told: list[tuple[Callable[[int, int], None], int, int]] = []
        self.warn: list[Subscriber] = []


def deliver_checked(
    subs: Iterable[Subscriber], message: Raw, got: set[object] | None, wake: bool
) -> tuple[int, Later | None]:
    """Give ``message`` to each of ``subs`` by its policy (the caller holds the lock).

    Each one with room gets it; a full ``drop_oldest`` one drops its oldest message for it, a
    full ``drop_newest`` one drops it; a full ``block`` one is left for the caller to wait for.
    ``got`` (when given) collects the subscribers done with the message; ``wake``: readers
    may be waiting. Returns the copies made, and what is left for after the lock (``None``:
    nothing).
    """
    copies = 0
    later: Later | None = None
    for sub in subs:
        items = sub.items
        sub.received += 1
        copied = dropped = 0
        if len(items) < sub.max_pending:
            items.append(message)
            copied = 1
        elif sub.on_full == "drop_oldest":
            try:  # noqa: SIM105 - contextlib.suppress costs a context manager per message
                items.popleft()
            except IndexError:  # a reader emptied it meanwhile
                pass
            items.append(message)
            copied = dropped = 1
        elif sub.on_full == "drop_newest":
            dropped = 1
        else:
            later = later or Later()
            later.blocked.append(sub)
            continue
        if got is not None:
            got.add(sub)
        copies += copied
        if dropped:
            sub.dropped += 1
            if not sub.warned:
                sub.warned = True
                later = later or Later()
                later.warn.append(sub)
        if copied and wake:
            sub.wake_locked()
        if sub.sink is not None:
            later = later or Later()
            later.told.append((sub.sink, copied, dropped))
    return copies, later
