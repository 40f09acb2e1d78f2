"""Job progress as the job function gives it: the checks of ``job.set_progress`` and where a job's
progress goes.

A job says how far it got with ``job.set_progress(fraction, message)``
(:meth:`varmq.Job.set_progress`). Only a queue that keeps job records stores it: an in-memory
queue bound with ``keep_results`` (its :class:`~varmq.sources.memory_records.JobBook`) or a
storage queue whose storage keeps progress (:class:`~varmq.contract.protocols.IJobProgress`, on
the queue's renewal thread: :mod:`varmq.sources.progress`). Each of those is a
:class:`ProgressSink`, registered here when it is made (:func:`add_sink`); a job finds its
:class:`ProgressWriter` the first time it sets progress (:func:`writer_of`: asks every sink
whether the job runs there) and keeps it. So a job that never sets progress costs nothing: no
registration per job, no field. No I/O here, and nothing of varmq is imported (this module sits
under :mod:`varmq.model.jobs`).
"""

from __future__ import annotations

import math
import numbers
import threading
import weakref
from typing import Any, Protocol

__all__ = [
    "MESSAGE_LIMIT",
    "NOWHERE",
    "ProgressSink",
    "ProgressWriter",
    "add_sink",
    "check_progress",
    "writer_of",
]

MESSAGE_LIMIT = 1024
"""Longest progress message kept, in bytes of UTF-8; a longer one is cut (at a character)."""


def check_progress(fraction: Any, message: Any) -> tuple[float, str | None]:
    """``(fraction, message)`` as a job's progress keeps them: ``fraction`` a real number from 0
    to 1 (a ``float`` then), ``message`` a ``str`` cut to :data:`MESSAGE_LIMIT` bytes of UTF-8
    (characters UTF-8 cannot encode, lone surrogates, become ``?``) or ``None``. Raises
    ``TypeError`` for a value of another type (a ``bool`` too) and ``ValueError`` for a fraction
    out of range or NaN, naming the value."""
    if type(fraction) is not float:
        if isinstance(fraction, bool) or not isinstance(fraction, numbers.Real):
            raise TypeError(
                f"varmq: set_progress: fraction must be a real number from 0 to 1, got "
                f"{fraction!r} ({type(fraction).__name__})"
            )
        fraction = float(fraction)
    if not 0.0 <= fraction <= 1.0:  # NaN compares False too
        raise ValueError(
            f"varmq: set_progress: fraction must be from 0 to 1, got {fraction!r}"
            + (" (NaN)" if math.isnan(fraction) else "")
        )
    if message is None:
        return fraction, None
    if not isinstance(message, str):
        raise TypeError(
            f"varmq: set_progress: message must be a str or None, got {message!r} "
            f"({type(message).__name__})"
        )
    if len(message) <= MESSAGE_LIMIT and message.isascii():
        return fraction, str(message)
    raw = message.encode("utf-8", "replace")  # a lone surrogate becomes "?"
    if len(raw) > MESSAGE_LIMIT:
        return fraction, raw[:MESSAGE_LIMIT].decode("utf-8", "ignore")  # no half character
    return fraction, raw.decode("utf-8")


class ProgressWriter(Protocol):
    """Where one running job's progress goes (given by its queue's :class:`ProgressSink`)."""

    def set(self, fraction: float, message: str | None) -> None:
        """Keep ``(fraction, message)`` (checked) as the job's progress; never raises for the
        storage's sake, never blocks on it."""
        ...


class ProgressSink(Protocol):
    """A queue's keeper of its running jobs' progress."""

    def progress_writer(self, job: Any) -> ProgressWriter | None:
        """The writer of ``job`` if it runs from this queue now (and the queue keeps its
        progress); ``None`` otherwise."""
        ...


class _Nowhere:
    """The writer of a running job whose queue keeps no progress: it drops every value."""

    __slots__ = ()

    def set(self, fraction: float, message: str | None) -> None:
        return None


NOWHERE: ProgressWriter = _Nowhere()
"""Kept by a running job whose queue keeps no progress, so that it looks for a writer once."""

# Every live sink of the process, by weak reference: a sink goes when its queue's worker does.
# _SINKS_LOCK guards _SINKS (a WeakSet is not safe to walk while another thread adds to it).
_SINKS_LOCK = threading.Lock()
_SINKS: weakref.WeakSet[ProgressSink] = weakref.WeakSet()


def add_sink(sink: ProgressSink) -> None:
    """Register ``sink`` (made with a queue that keeps progress) for as long as it lives."""
    with _SINKS_LOCK:
        _SINKS.add(sink)


def writer_of(job: Any) -> ProgressWriter | None:
    """The writer of ``job`` from the sink of the queue it runs from; ``None`` when no queue of
    this process runs it and keeps its progress. Asked once per job that sets progress: one
    look per sink of the process (a sink per bound queue that keeps records)."""
    with _SINKS_LOCK:
        sinks = list(_SINKS)
    for sink in sinks:
        writer = sink.progress_writer(job)
        if writer is not None:
            return writer
    return None
