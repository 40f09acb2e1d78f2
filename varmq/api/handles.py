"""What every queue handle shares: how it makes jobs (:class:`Producer`, :class:`JobMaker`), the
checks of ``add``'s arguments, and length, capacity, purge and close (:class:`Handle`).

The handles themselves are :mod:`varmq.api.queues` (in memory: job objects and job handles) and
:mod:`varmq.api.storage_queues` (adapters: JSON envelopes). No I/O here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..model import validate
from ..model.groups import EnqueuedGroupJob, Group
from ..model.jobs import EnqueuedJob, cancel_waiting

if TYPE_CHECKING:
    from ..engine.dispatch import Dispatcher

__all__ = [
    "Handle",
    "JobMaker",
    "Producer",
    "delay_of",
    "job_id_of",
    "no_id",
    "priority_of",
    "require",
    "timeout_of",
]

H = TypeVar("H", bound=EnqueuedJob[Any])
G = TypeVar("G", bound=EnqueuedGroupJob)


def no_id() -> str:
    """The default job id generator: no id (``""``)."""
    return ""


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class Producer:
    """What a handle adds jobs with: the id generator, the payload encoder, and the worker's
    dispatcher to tell (``None`` for a producer-only handle)."""

    next_id: Callable[[], str]
    to_json: Callable[[Any], Any] | None = None
    dispatch: Dispatcher | None = None
    #: Called after a delayed add: the worker's timer must bring the job back.
    on_delayed: Callable[[], None] = _nothing


@dataclass(frozen=True)
class JobMaker(Generic[H, G]):
    """How an in-memory handle makes job handles: the worker kind's job and group classes."""

    new_job: Callable[[str, Any, Group | None], H]
    new_group: Callable[[int], tuple[Group, Callable[[Group, list[H]], G]]]


def delay_of(delay: float | None, run_at: datetime | None) -> float:
    """Seconds from now until a job may run (0: now); refuses what is not a delay."""
    if run_at is not None:
        if delay is not None:
            raise ValueError("varmq: add() takes delay= or run_at=, not both")
        if not isinstance(run_at, datetime):
            raise TypeError(
                f"varmq: run_at must be a datetime, got {run_at!r} ({type(run_at).__name__}); "
                "for seconds from now, use delay="
            )
        if run_at.utcoffset() is None:
            # datetime.timestamp() would read it in this machine's local time zone, which a
            # producer and its consumers need not share: one rule, no guessing.
            raise ValueError(
                f"varmq: run_at={run_at!r} has no time zone; give an aware datetime, e.g. "
                "datetime.now(timezone.utc) + timedelta(hours=1)"
            )
        return max(run_at.timestamp() - time.time(), 0.0)
    if delay is None:
        return 0.0
    return validate.seconds("delay", delay)


def job_id_of(job_id: object) -> str | None:
    """``job_id`` checked: a ``str`` or ``None``."""
    if job_id is not None and not isinstance(job_id, str):
        raise TypeError(f"varmq: job_id must be a str, got {job_id!r} ({type(job_id).__name__})")
    return job_id


def priority_of(priority: object) -> int:
    """``priority`` checked: an ``int``."""
    return validate.whole("priority", priority)


def timeout_of(timeout: object) -> float | None:
    """``timeout`` checked: seconds above 0, or ``None``."""
    return None if timeout is None else validate.seconds("timeout", timeout, positive=True)


class Handle:
    """What every queue handle offers: length, capacity, purge and close."""

    def __init__(self, storage: Any, capacity: int) -> None:
        self._storage = storage
        self._capacity = max(0, capacity)

    def __len__(self) -> int:
        """Jobs waiting in the queue (for storage: in storage, from every process)."""
        return len(self._storage)

    def is_full(self) -> bool:
        """``True`` when a capacity was given and that many jobs wait."""
        return self._capacity > 0 and len(self._storage) >= self._capacity

    def purge(self) -> None:
        """Remove every waiting job; waiting callers of purged jobs are released."""
        snapshot = self._storage.values()
        self._storage.purge()
        cancel_waiting(snapshot)

    def close(self) -> None:
        """Refuse further adds; jobs already queued are still processed."""
        self._storage.close()


def require(q: object, protocol: type, method: str) -> None:
    """Raise ``TypeError`` naming ``method`` unless ``q`` implements ``protocol``."""
    if not isinstance(q, protocol):
        raise TypeError(f"{method} needs an {protocol.__name__}, got {type(q).__name__}")
