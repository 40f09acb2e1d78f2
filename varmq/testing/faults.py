"""Failure switches of the reference storage: what a test flips to make a storage refuse, fail
or go away (:class:`Faults`). No state beyond the switches."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Faults"]


@dataclass
class Faults:
    """Failure switches for one queue object; all off by default, each can be flipped any time.

    - ``refuse_enqueue``: ``enqueue``, ``enqueue_dedup`` and ``enqueue_delayed`` return ``False``,
      storing nothing;
    - ``take_error``: every take (``dequeue``, ``dequeue_with_ack_id``, batch takes) raises it,
      e.g. ``ConnectionError("injected")``; ``None`` to stop;
    - ``refuse_ack``: ``acknowledge``, ``acknowledge_many``, ``acknowledge_with_results`` and
      ``fail`` return ``False``; the job stays leased, so it comes back when its lease expires;
    - ``refuse_extend``: ``extend_lease`` returns ``False`` (``extend_lease_or_cancel``:
      ``"lost"``) and leaves the deadline as it was;
    - ``refuse_nack``: ``nack`` returns ``False``; the job stays leased;
    - ``refuse_dead_letter``: ``dead_letter`` and ``dead_letter_with_error`` return ``False``;
      the job stays leased;
    - ``unreachable``: every call that would reach the storage raises it, e.g.
      ``ConnectionError("storage down")``, as a storage that cannot answer does; nothing is
      changed meanwhile, and leases keep running out; ``None`` to bring it back.
    """

    refuse_enqueue: bool = False
    take_error: BaseException | None = None
    refuse_ack: bool = False
    refuse_extend: bool = False
    refuse_nack: bool = False
    refuse_dead_letter: bool = False
    unreachable: BaseException | None = None

    def clear(self) -> None:
        """Turn every switch off."""
        self.refuse_enqueue = self.refuse_ack = self.refuse_extend = False
        self.refuse_nack = self.refuse_dead_letter = False
        self.take_error = self.unreachable = None

    def reach(self) -> None:
        """Raise the ``unreachable`` error, if set (each storage call begins with this)."""
        if self.unreachable is not None:
            raise self.unreachable.with_traceback(None)
