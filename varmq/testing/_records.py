"""The reference storage's job records: one book per named queue, kept under the storage's lock.

Private to ``varmq.testing``: :class:`RecordBook` holds the :class:`Record` of every job added with
an id through a queue object opened with ``keep_results``, moves it through the states of
``varmq.contract.protocols`` ("Job records") when :mod:`varmq.testing.storage` tells it what
happened to the job, and drops ended records after their ``keep_results`` and beyond the queue's
``keep_results_limit``. No locking and no clock of its own: the caller holds the storage's lock and
passes the time (the storage clock for expiry, Unix seconds for the fields). No I/O.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from varmq.contract.protocols import ENDED_STATES, StoredJobRecord

__all__ = ["Record", "RecordBook"]


@dataclass
class Record:
    """One job's record, as the reference storage keeps it."""

    job_id: str
    state: str
    keep: float  # seconds it is kept once ended: the keep_results of the object that added it
    enqueued_at: float  # Unix seconds, like every field a caller reads
    attempts: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    result: bytes | None = None
    error: bytes | None = None
    cancel_requested: bool = False
    progress: bytes | None = None  # set_progress of the last take; cleared by each take
    ended_generation: int = 0  # bumped at every end, so a stale expiry entry is recognised
    expires_at: float = 0.0  # storage clock reading at which an ended record is dropped

    @property
    def ended(self) -> bool:
        """Whether the job will not run again (its record is counted and expires)."""
        return self.state in ENDED_STATES

    def stored(self) -> StoredJobRecord:
        """The record as ``job_record`` returns it."""
        return {
            "id": self.job_id,
            "state": self.state,
            "attempts": self.attempts,
            "result": self.result,
            "error": self.error,
            "enqueued_at": self.enqueued_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "cancel_requested": self.cancel_requested,
            "progress": self.progress,
        }


@dataclass
class RecordBook:
    """The records of one named queue.

    Invariant (under the storage's lock): ``by_id`` maps every kept job id to its record;
    ``ended`` holds exactly the ended ones among them, in the order they ended; every ended
    record has one live entry in ``expiry`` (matched by its generation).
    """

    by_id: dict[str, Record] = field(default_factory=dict)
    ended: dict[str, Record] = field(default_factory=dict)
    expiry: list[tuple[float, int, str, int]] = field(default_factory=list)
    news: list[str] = field(default_factory=list)  # ids that ended, not told to subscribers yet
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    def holds(self, job_id: str | None) -> bool:
        """Whether a kept record holds ``job_id`` (so adding it again stores nothing)."""
        return job_id is not None and job_id in self.by_id

    def get(self, job_id: str) -> Record | None:
        """The kept record of ``job_id``, if any."""
        return self.by_id.get(job_id)

    def create(self, job_id: str, state: str, keep: float, wall: float) -> Record:
        """A new record for a job just added (any older one of that id was dropped)."""
        record = Record(job_id, state, keep, wall)
        self.by_id[job_id] = record
        return record

    def revive(self, record: Record, wall: float) -> None:
        """A dead job requeued: its record is queued again, with no attempt and no outcome."""
        self.ended.pop(record.job_id, None)
        record.state = "queued"
        record.attempts = 0
        record.enqueued_at = wall
        record.started_at = record.finished_at = None
        record.result = record.error = record.progress = None
        record.cancel_requested = False
        record.ended_generation += 1  # its expiry entry is stale now

    def end(
        self,
        record: Record,
        state: str,
        *,
        now: float,
        wall: float,
        limit: int,
        result: bytes | None = None,
        error: bytes | None = None,
    ) -> None:
        """``record`` reached the ended ``state``: kept ``record.keep`` seconds from ``now``
        (storage clock), and the oldest ended records beyond ``limit`` are dropped."""
        record.state = state
        record.finished_at = wall
        record.result = result
        record.error = error
        record.ended_generation += 1
        self.ended.pop(record.job_id, None)
        self.ended[record.job_id] = record
        record.expires_at = now + record.keep
        entry = (record.expires_at, next(self._seq), record.job_id, record.ended_generation)
        heapq.heappush(self.expiry, entry)
        self.news.append(record.job_id)
        while len(self.ended) > limit:
            self._drop(next(iter(self.ended)))
        if len(self.expiry) > 2 * len(self.ended) + 64:
            # Entries of records dropped by the limit or revived: rebuilt, so it stays bounded.
            self.expiry = [
                (r.expires_at, next(self._seq), r.job_id, r.ended_generation)
                for r in self.ended.values()
            ]
            heapq.heapify(self.expiry)

    def prune(self, now: float) -> None:
        """Drop the ended records whose time is up at ``now`` (storage clock)."""
        expiry = self.expiry
        while expiry and expiry[0][0] <= now:
            _, _, job_id, generation = heapq.heappop(expiry)
            record = self.by_id.get(job_id)
            if record is not None and record.ended and record.ended_generation == generation:
                self._drop(job_id)

    def _drop(self, job_id: str) -> None:
        self.ended.pop(job_id, None)
        self.by_id.pop(job_id, None)
