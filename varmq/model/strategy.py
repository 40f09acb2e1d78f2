"""How a worker with several bound queues picks the next one: the :class:`Strategy` values.

The picking itself is the engine's (:mod:`varmq.engine.strategies`); this is the value users
pass as ``strategy=``. No state here.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["Strategy"]


class Strategy(str, Enum):
    """How a worker with several queues chooses the next one to take from.

    - ``PRIORITY`` (default): the first queue with jobs, by the ``priority=`` given when
      binding (lower first; equal priorities in bind order).
    - ``ROUND_ROBIN``: the next queue with jobs after the last one picked.
    - ``MAX_LEN``: the queue with the most jobs waiting.
    - ``MIN_LEN``: the queue with the fewest jobs waiting, among queues with any.
    """

    PRIORITY = "priority"
    ROUND_ROBIN = "round_robin"
    MAX_LEN = "max_len"
    MIN_LEN = "min_len"
