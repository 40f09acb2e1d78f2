"""Recurring jobs: ``worker.schedule(name, every=... | cron=..., data=..., queue=...)``.

A :class:`Schedule` adds one job per *occurrence* to its queue, with the job id
``f"{name}:{occurrence}"``, the occurrence written as its time in UTC, ISO 8601
(``"report:2025-06-01T10:05:00Z"``; with milliseconds, ``"...T10:05:00.250Z"``, for an
``every`` that is not a whole number of seconds, so that the ids of one schedule sort). Every
process that declares the same schedule computes the same occurrences, so it adds the same ids.
A storage queue that keeps schedule marks (:class:`~varmq.contract.protocols.IScheduleMarks`:
sqliteq, redisq) stores, in the same atomic step as each add, the latest occurrence added per
schedule, and adds no occurrence at or before it: each occurrence runs once however many
processes add it and however many records of other jobs the queue prunes meanwhile. Elsewhere
the queue's dedup (the job's record, which holds its id for ``keep_results`` seconds after it
ended) does it while the record is kept. No leader, no lock.

- ``every=SECONDS``: the occurrences are the multiples of ``SECONDS`` since the Unix epoch
  (``every=300`` fires at :00, :05, :10... past the hour in every process alike); needs nothing.
- ``cron="*/5 * * * *"``: the times the cron expression matches, in UTC (a sixth field gives
  seconds), through the ``cronsim`` package: ``pip install 'varmq[cron]'``.

Missed occurrences. When a schedule is checked (its worker starts, resumes, or its timer wakes
late) it fires the *latest* occurrence at or before now that it has not fired, once; the ones
before it are skipped. After everything was down for an hour, an ``every=300`` schedule fires
once, not twelve times; a worker that starts between two occurrences fires the last one at once
(a no-op where another process fired it and its record is still kept). A paused worker fires
nothing, and fires the latest occurrence once when it resumes.

The worker's timer (:mod:`varmq.engine.timer`) decides when; the adds themselves run on the
library's producer threads, so that a storage that is slow to answer never delays the timer.
"""

from __future__ import annotations

import datetime
import logging
import math
import threading
from collections.abc import Callable
from typing import Any

from ..contract import envelope
from ..contract.protocols import IDedupQueue, IJobRecords
from ..model import validate

__all__ = ["Schedule", "check_data", "check_storage", "occurrence_id"]

log = logging.getLogger("varmq.worker")

_UTC = datetime.timezone.utc


def occurrence_id(name: str, when: float, millis: bool = False) -> str:
    """The job id of the occurrence of schedule ``name`` at ``when`` (Unix seconds), with the
    milliseconds when ``millis``."""
    ms = round(when * 1000)
    stamp = datetime.datetime.fromtimestamp(ms // 1000, _UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{name}:{stamp}{f'.{ms % 1000:03d}' if millis else ''}Z"


class _Every:
    """Occurrences every ``seconds`` since the Unix epoch."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def latest(self, now: float) -> float | None:
        return math.floor(now / self.seconds) * self.seconds

    def following(self, now: float) -> float:
        return (math.floor(now / self.seconds) + 1) * self.seconds


class _Cron:
    """Occurrences where a cron expression matches, in UTC (``cronsim``)."""

    def __init__(self, expression: str) -> None:
        try:
            from cronsim import CronSim, CronSimError
        except ImportError as exc:
            raise ImportError(
                "varmq: schedule(cron=...) needs the cronsim package: "
                "pip install 'varmq[cron]' (every=SECONDS needs nothing)"
            ) from exc
        _refuse_seconds_last(expression)
        try:
            CronSim(expression, datetime.datetime.now(_UTC))
        except CronSimError as exc:
            raise ValueError(
                f"varmq: cron={expression!r} is not a cron expression: {exc}"
            ) from None
        self._sim = CronSim
        self.expression = expression

    def latest(self, now: float) -> float | None:
        # Strictly before the next microsecond: at or before now.
        start = datetime.datetime.fromtimestamp(now, _UTC) + datetime.timedelta(microseconds=1)
        try:
            return next(self._sim(self.expression, start, reverse=True)).timestamp()
        except StopIteration:  # no match in the last 50 years
            return None

    def following(self, now: float) -> float:
        start = datetime.datetime.fromtimestamp(now, _UTC)
        try:
            return next(self._sim(self.expression, start)).timestamp()
        except StopIteration:  # no match in the next 50 years: look again in a day
            return now + 86_400.0


def _refuse_seconds_last(expression: str) -> None:
    """Refuse a six-field expression that looks written with the seconds last.

    Six fields are read as SECOND MINUTE HOUR DAY MONTH WEEKDAY (cronsim's order): the seconds
    come first. ``"* * * * * */2"`` would then fire every second, on every other weekday; it
    almost surely meant every two seconds. A six-field expression whose first field is ``*``
    and whose last is not is refused with the form it probably meant.
    """
    fields = expression.split()
    if len(fields) == 6 and fields[0] == "*" and fields[-1] != "*":
        meant = " ".join([fields[-1], *fields[:-1]])
        raise ValueError(
            f"varmq: cron={expression!r} has six fields: they are read as SECOND MINUTE HOUR "
            f"DAY MONTH WEEKDAY, seconds first, so it would fire every second; for the "
            f"seconds you gave last, write cron={meant!r}"
        )


class Schedule:
    """A recurring job of one worker: made by ``worker.schedule(...)``; ``cancel()`` ends it.

    ``name``, ``every`` (seconds, or ``None``), ``cron`` (the expression, or ``None``),
    ``data`` (what every occurrence's job gets) and ``queue`` (the handle it adds to) are as
    given; ``last_fired`` is the time (Unix seconds) of the last occurrence this process added,
    ``None`` before the first.
    """

    def __init__(
        self,
        name: str,
        *,
        every: float | None,
        cron: str | None,
        data: Any,
        queue: Any,
        add: Callable[[str, float], object],
        report: Callable[[BaseException], None],
        on_cancel: Callable[[Schedule], None],
    ) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"varmq: a schedule's name must be a non-empty str, got {name!r}")
        if (every is None) == (cron is None):
            raise TypeError(f"varmq: schedule {name!r}: give every=SECONDS or cron=EXPRESSION")
        self.name = name
        self.every = None if every is None else validate.seconds("every", every, positive=True)
        if cron is not None and not isinstance(cron, str):
            raise TypeError(f"varmq: schedule {name!r}: cron must be a str, got {cron!r}")
        self.cron = cron
        self._times: _Every | _Cron = _Cron(cron) if cron is not None else _Every(self.every or 0)
        self._millis = self.every is not None and self.every != int(self.every)
        self.data = data
        self.queue = queue
        self._add = add  # adds ``data`` to ``queue`` as the occurrence (job id, time), strict
        self._report = report
        self._on_cancel = on_cancel
        # Guards last_fired and _failing: the timer checks, a producer thread adds.
        self._lock = threading.Lock()
        self.last_fired: float | None = None
        self._failing = False

    def __repr__(self) -> str:
        when = f"every={self.every!r}" if self.cron is None else f"cron={self.cron!r}"
        return f"<Schedule {self.name!r} {when}>"

    def cancel(self) -> None:
        """Stop adding occurrences from this process (jobs already added stay)."""
        self._on_cancel(self)

    # -- the timer's side ------------------------------------------------------------------

    def due(self, now: float) -> float | None:
        """The occurrence to add at ``now`` (Unix seconds): the latest one at or before
        ``now`` unless it was added already; ``None`` when there is none to add."""
        latest = self._times.latest(now)
        with self._lock:
            if latest is None or (self.last_fired is not None and latest <= self.last_fired):
                return None
            self.last_fired = latest
        return latest

    def next_after(self, now: float) -> float:
        """When (Unix seconds) the next occurrence after ``now`` is due."""
        return self._times.following(now)

    def period(self, now: float) -> float:
        """Seconds between the next two occurrences after ``now`` (the period of ``every``)."""
        first = self._times.following(now)
        return self._times.following(first) - first

    def fire(self, when: float) -> None:
        """Add the occurrence at ``when`` to the queue (on a producer thread)."""
        job_id = occurrence_id(self.name, when, self._millis)
        try:
            self._add(job_id, when)
        except Exception as exc:
            with self._lock:
                first, self._failing = not self._failing, True
            if first:
                log.warning("varmq: schedule %r: adding %s failed: %s", self.name, job_id, exc)
            self._report(exc)
            return
        with self._lock:
            recovered, self._failing = self._failing, False
        if recovered:
            log.warning("varmq: schedule %r: adding occurrences works again", self.name)


def check_storage(schedule: Schedule, storage: Any, now: float) -> None:
    """Refuse ``storage`` (of a storage handle) when it cannot deduplicate the occurrences of
    ``schedule`` across processes; warn when its records are kept shorter than the period."""
    name = schedule.name
    label = getattr(storage, "name", None) or type(storage).__name__
    if not isinstance(storage, IDedupQueue):
        raise TypeError(
            f"varmq: schedule {name!r}: {type(storage).__name__} cannot deduplicate job ids "
            "(no enqueue_dedup), so several processes would run each occurrence"
        )
    keep = float(storage.keep_results) if isinstance(storage, IJobRecords) else 0.0
    if not keep > 0:
        raise ValueError(
            f"varmq: schedule {name!r}: queue {label!r} keeps no job records, so an occurrence "
            "that already ran could be added again by another process; open it with "
            "keep_results=SECONDS (at least the schedule's period)"
        )
    period = schedule.period(now)
    if keep < period:
        log.warning(
            "varmq: schedule %r: queue %r keeps job records %g s, less than the %g s between "
            "two occurrences: a process that starts after a record expired fires its "
            "occurrence again; open the queue with keep_results >= %g",
            name,
            label,
            keep,
            period,
            period,
        )


def check_data(name: str, data: Any, to_json: Callable[[Any], Any] | None) -> None:
    """Refuse ``data`` that a storage queue could not store, at declaration, not at each add."""
    try:
        envelope.encode(name, data, to_json)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"varmq: schedule {name!r}: data: {exc}") from None
