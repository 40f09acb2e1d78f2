"""A taken job's lease, from the take to the acknowledgement: :class:`StorageJob` (the job and its
lease), :class:`Leases` (tracking and renewing the leases of one queue's jobs, on a thread of
the queue's own, which also writes their progress: :mod:`varmq.sources.progress`) and
:class:`Acknowledgements` (how their ends are sent).

A storage queue that acknowledges many ids in one call (``acknowledge_many``, or
``acknowledge_with_results`` on a queue that keeps a result worker's values) gets its
acknowledgements through :class:`Acknowledgements`. Two things decide when a call is made:

- **Group commit without making anyone wait** (:class:`varmq.contract.batching.GroupCommit`,
  its posts). A finished job's ack id joins the pending batch; the first thread that finds no
  call under way sends every pending id, batch after batch, until none is left, and the others
  go straight on to their next job.
- **One acknowledgement per take** (:class:`Take`). The jobs of one take usually finish close
  together. Sent at once, the first of them to finish would go alone and the rest in a second
  call: two storage writes per take where one does. So while a job's take still has jobs this
  process has not settled, and the take is younger than the hold (:data:`ACK_HOLD`, or a tenth
  of the lease if that is shorter), its ack waits in the batch. The job of the take that
  settles last sends the batch; when the hold runs out first (a slow job in the take), the
  queue's renewal thread sends it (:meth:`Acknowledgements.send_held`). A held ack is pending
  like any other: a worker stops only once it was sent, and a process that dies before that
  runs the job again, as it would after any ack that was not sent yet.

A storage that acknowledges one id per call (``acknowledge``) gets each call at once, and so
does a job whose take is older than the hold: holding back buys nothing when the other jobs of
the take are slow.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

from ..contract.batching import GroupCommit
from ..contract.protocols import IAcknowledgeable, IMultiAcknowledgeable
from ..model.errors import AcknowledgeJobError, LeaseLostError
from ..model.jobs import Job

if TYPE_CHECKING:
    from .base import Report

__all__ = ["ACK_HOLD", "Acknowledgements", "LeaseRenewer", "Leases", "StorageJob", "Take"]

# After a renewal that raised (storage unreachable), try again this soon.
_RENEW_RETRY = 1.0
# On a queue with job records, leases are renewed at least this often, so that a running job
# hears of a cancel within this many seconds however long its lease is.
_CANCEL_CHECK = 5.0

#: Seconds after its take that an acknowledgement may wait for the other jobs of that take.
ACK_HOLD = 0.002


START_CHECK_AFTER = 0.005
"""Seconds a job of a queue with records may wait between the storage's last answer for it
(its take, a renewal) and its start before the worker asks the storage again: a cancel that
answered ``True`` meanwhile then keeps it from starting. A job taken for a free slot normally
starts well within it, so a drain makes no extra call."""


class StorageJob(Job[Any]):
    """A job taken from storage: it carries its lease (ack id) and when to renew it."""

    __slots__ = (
        "ack_id",
        "ahead",
        "cancel_seen",
        "checked_at",
        "deadline",
        "handed_back",
        "lost",
        "renew_at",
        "result",
        "take",
    )

    #: The JSON bytes of a result worker's value, set just before the acknowledgement that
    #: records it (job records only; never set otherwise).
    result: bytes
    #: Set (``True``) when the job was handed back to storage while it ran, the process ending
    #: (``Leases.let_go``): an acknowledgement of it refused after that is expected, not
    #: reported. Never set otherwise (read with ``getattr``, only when a settle failed).
    handed_back: bool

    def __init__(self, job_id: str, data: Any, attempt: int, ack_id: str) -> None:
        # Job's fields set here directly: this runs once per job taken.
        self.id = job_id
        self.data = data
        self.attempt = attempt
        self._extra = None
        self.ack_id = ack_id
        #: When to renew the lease next, and when it runs out (this process's monotonic clock).
        self.renew_at = 0.0
        self.deadline = float("inf")
        #: Set once the lease is known to be lost: the job must not start (or be settled) here.
        self.lost = False
        #: Set once a lease renewal said the job was cancelled by id (job records only).
        self.cancel_seen = False
        #: When the storage last said the lease is held and no cancel was asked: the take, or
        #: a renewal (this process's monotonic clock).
        self.checked_at = 0.0
        #: Taken ahead of a free slot (the prefetch): it asks the storage before it starts.
        self.ahead = False
        #: The jobs taken with it, while its acknowledgement may wait for them (see acks).
        self.take: Take | None = None


class Leases:
    """The leases of one storage queue's taken jobs, from the take to the acknowledgement.

    Every job taken under a lease has a deadline on this process's monotonic clock: the take's
    start plus the lease, moved on by each renewal that the storage confirmed (from the moment
    the renewal was sent). A renewal that fails to reach the storage is retried until that
    deadline passes; only a refusal (the storage says the lease is not held) or a passed
    deadline loses the lease. A lost lease is reported once, and a job that lost it before it
    started is dropped instead of run (another consumer has it now).

    ``_lock`` guards ``_held`` (id of the job -> the job): the jobs taken and not settled whose
    leases the renewal thread renews; the ``deadline``, ``renew_at`` and ``cancel_seen`` of a
    held job change under it. The renewal thread (:class:`LeaseRenewer`, one per queue so that
    a storage that hangs never delays another's renewals) also sends the acknowledgements whose
    hold ran out (:attr:`acks`). On a queue with job records (``records``), renewals go through
    ``extend_lease_or_cancel``, which is where a running job hears that it was cancelled by id:
    ``stop_cancelled`` is then called with it.
    """

    def __init__(
        self,
        storage: Any,
        *,
        name: str,
        label: str,
        records: bool,
        results: bool,
        report: Report,
        on_settled: Callable[[], None],
        stop_cancelled: Callable[[list[StorageJob]], None],
    ) -> None:
        """``name`` names the renewal thread, ``label`` the queue; ``results``:
        acknowledgements carry a result worker's values (``acknowledge_with_results``)."""
        self._storage = storage
        self._records = records
        self._report = report
        self._stop_cancelled = stop_cancelled
        self._lock = threading.Lock()
        self._held: dict[int, StorageJob] = {}
        self._renewer = LeaseRenewer(self._round, name)
        #: What else the renewal thread does, set by the source: its running jobs' progress
        #: writes (varmq.sources.progress), given the time; when they are due next.
        self.progress_due: Callable[[float], float | None] | None = None
        #: The worker's record in the queue's store (varmq.sources.registration), refreshed
        #: every few seconds, given the time; when it is due next (None: the worker stopped).
        self.registration_due: Callable[[float], float | None] | None = None
        #: The acknowledgements of the queue's jobs (sent at once, or with the rest of a take).
        self.acks = Acknowledgements(
            storage,
            batched=isinstance(storage, IMultiAcknowledgeable),
            report=report,
            on_settled=on_settled,
            on_hold=self._renewer.poke,
            results=results,
            label=label,
        )

    def seconds(self) -> float:
        """How long a lease lasts; 0 when the storage cannot say."""
        try:
            return float(self._storage.lease_seconds)
        except Exception:
            return 0.0

    def track(self, jobs: list[StorageJob], started: float) -> None:
        """Renew the leases of ``jobs`` (taken at ``started``) until they are settled."""
        lease = self.seconds()
        if lease <= 0:
            return
        renew_at = started + self._period(lease)
        if self.acks.batched:
            take_of(jobs, started, lease)
        with self._lock:
            for job in jobs:
                job.deadline = started + lease
                job.renew_at = renew_at
                job.checked_at = started
                self._held[id(job)] = job
        self._renewer.poke(renew_at)  # its next renewal may be sooner than it planned

    def _period(self, lease: float) -> float:
        """Seconds between two renewals of a lease of ``lease`` seconds."""
        period = lease / 3
        return min(period, _CANCEL_CHECK) if self._records else period

    def holds(self, job: StorageJob) -> bool:
        """Whether ``job`` was taken here and is not settled (its lease is renewed)."""
        with self._lock:
            return self._held.get(id(job)) is job

    def poke(self, due: float) -> None:
        """Something of the renewal thread's is due at ``due`` (monotonic): see to it then."""
        self._renewer.poke(due)

    def forget(self, job: StorageJob) -> None:
        """``job`` is being settled: its lease is no longer renewed."""
        if self._held:
            with self._lock:
                self._held.pop(id(job), None)

    def let_go(self) -> list[StorageJob]:
        """Every held job (taken, not settled), no longer renewed and flagged ``lost``, so
        that one still waiting in the worker's buffer is dropped instead of started: the
        process is ending (``hard_timeout``) and gives them back."""
        with self._lock:
            jobs = list(self._held.values())
            self._held.clear()
            for job in jobs:
                job.lost = True
                job.handed_back = True
        return jobs

    def cancelled(self, job_id: str) -> list[StorageJob]:
        """The held jobs of ``job_id``, just flagged cancelled in storage through this process,
        that did not know yet (now they do)."""
        with self._lock:
            found = [j for j in self._held.values() if j.id == job_id and not j.cancel_seen]
            for job in found:
                job.cancel_seen = True
        return found

    def start_check_due(self, job: StorageJob) -> bool:
        """Whether ``job``, about to start, must first ask the storage (:meth:`may_start`): on
        a queue with records, when it was taken ahead of a free slot (the prefetch), or more
        than :data:`START_CHECK_AFTER` passed since the storage last answered for it (its
        slot's thread was slow to come, on a loaded machine). No storage call."""
        return self._records and (
            job.ahead or time.monotonic() - job.checked_at > START_CHECK_AFTER
        )

    def may_start(self, job: StorageJob) -> bool:
        """Ask the storage whether ``job`` may start: ``False`` when its cancel was requested
        (``extend_lease_or_cancel``, decided in one atomic step with any cancel: a cancel that
        answered before is seen here). The lease is renewed on the way; a storage that cannot
        answer lets the job start (its renewals will tell of a cancel, as before)."""
        if self._ask(job) == "cancel":
            with self._lock:
                job.cancel_seen = True
            return False
        return True

    def cancel_requested(self, job: StorageJob) -> bool:
        """Whether the storage says ``job``'s cancel was requested (records only; ``False``
        when it cannot answer), before a failed run is given back to be retried."""
        return self._records and (job.cancel_seen or self._ask(job) == "cancel")

    def _ask(self, job: StorageJob) -> str | None:
        """``extend_lease_or_cancel`` of ``job``, its deadline moved on when held; ``None``
        when the storage cannot answer."""
        sent = time.monotonic()
        try:
            answer = str(self._storage.extend_lease_or_cancel(job.ack_id))
        except Exception:
            return None
        if answer == "held":
            lease = self.seconds()
            with self._lock:
                job.checked_at = sent
                if id(job) in self._held:
                    job.deadline = sent + lease
                    job.renew_at = sent + self._period(lease)
        return answer

    def expired(self, job: StorageJob, now: float) -> bool:
        """Whether ``job``, taken and not started, lost its lease (and so leaves, reported once).

        Called under the dispatcher's lock: it makes no storage call."""
        if not (job.lost or now >= job.deadline):
            return False
        self.forget(job)
        self.acks.leave(job, flush=False)
        if not job.lost:
            job.lost = True
            self._report(LeaseLostError(job.id, job.ack_id))
        return True

    def stop(self) -> None:
        """The worker stopped: the renewal thread ends."""
        self._renewer.stop()

    def _round(self, now: float) -> float | None:
        """The renewal thread's work: held acknowledgements whose hold ran out, then leases,
        then progress writes and the worker's record; when to come back (``None``: nothing is
        held)."""
        due = [self.acks.send_held(now), self._renew(time.monotonic())]
        if self.progress_due is not None:
            due.append(self.progress_due(time.monotonic()))
        if self.registration_due is not None:
            due.append(self.registration_due(time.monotonic()))
        return min((at for at in due if at is not None), default=None)

    def _renew(self, now: float) -> float | None:
        """Renew the leases that are due; the time of the next renewal (``None``: none held)."""
        with self._lock:
            due = [job for job in self._held.values() if job.renew_at <= now]
            later = [job.renew_at for job in self._held.values() if job.renew_at > now]
        if not due:
            return min(later, default=None)
        lease = self.seconds()
        period = self._period(lease)
        cancelled: list[StorageJob] = []
        storage = self._storage
        for job in due:
            sent = time.monotonic()
            cancel = False
            try:
                if self._records:
                    answer = storage.extend_lease_or_cancel(job.ack_id)
                    kept, cancel = answer != "lost", answer == "cancel"
                else:
                    kept = bool(storage.extend_lease(job.ack_id))
            except Exception:
                # Storage unreachable: the lease may still be ours until its deadline.
                if time.monotonic() < job.deadline:
                    job.renew_at = time.monotonic() + min(_RENEW_RETRY, lease / 6)
                    continue
                kept = False
            with self._lock:
                if id(job) not in self._held:
                    continue  # settled meanwhile
                if kept:
                    job.deadline = sent + lease
                    job.renew_at = sent + period
                    if not cancel:
                        job.checked_at = sent
                    if cancel and not job.cancel_seen:
                        job.cancel_seen = True
                        cancelled.append(job)
                    continue
                del self._held[id(job)]
            job.lost = True
            self._report(LeaseLostError(job.id, job.ack_id))
        if cancelled:
            self._stop_cancelled(cancelled)
        return time.monotonic()  # renewals took time: look again at once


class Take:
    """The jobs of one take that this process has not settled yet, and until when the
    acknowledgements of the settled ones may wait for them (this process's monotonic clock)."""

    __slots__ = ("hold_until", "left")

    def __init__(self, left: int, hold_until: float) -> None:
        self.left = left
        self.hold_until = hold_until


class Acknowledgements:
    """Acknowledgements of one storage queue (see the module's docstring).

    ``batched``: the storage has ``acknowledge_many``. ``results`` (a result worker on a queue
    with job records): every acknowledgement carries its job's result bytes (``job.result``),
    through ``acknowledge_with_results``. ``on_hold(at)`` is called when an acknowledgement
    starts to wait: :meth:`send_held` must then run at ``at`` (or soon after). ``on_settled``
    is called after acknowledgements that were counted in :attr:`unacked` were sent.

    Batches go through a group commit (:class:`varmq.contract.batching.GroupCommit`) that no
    caller waits on: a finished job's ack is posted, and the thread that finds no call under
    way sends every posted one. ``_lock`` guards the :class:`Take` of every job, ``_held_until``
    and ``_unbatched``; the group commit's own lock guards what waits to be sent.
    """

    def __init__(
        self,
        storage: Any,
        *,
        batched: bool,
        report: Report,
        on_settled: Callable[[], None],
        on_hold: Callable[[float], None],
        results: bool = False,
        label: str = "",
    ) -> None:
        self._storage = storage
        self._label = label  # the queue's name, in errors
        self._results = results
        #: Whether acknowledgements go in batches (then the jobs of a take may wait together).
        self.batched = batched or results  # acknowledge_with_results takes batches
        self._report = report
        self._on_settled = on_settled
        self._on_hold = on_hold
        self._acked = isinstance(storage, IAcknowledgeable)
        self._group: GroupCommit[StorageJob, bool] = GroupCommit(self._write)
        self._lock = threading.Lock()
        # When the earliest held acknowledgement must be sent; inf: none is held.
        self._held_until = math.inf
        # Single acknowledgements handed to an executor and not answered yet.
        self._unbatched = 0

    @property
    def unacked(self) -> int:
        """Acknowledgements not sent yet (a worker stops once this is 0)."""
        return self._group.unanswered + self._unbatched

    # -- a job leaves this process ------------------------------------------------------------

    def send(self, job: StorageJob) -> None:
        """Acknowledge ``job`` (now, or with the rest of its take); failures are reported as
        :class:`AcknowledgeJobError`."""
        if not job.ack_id or not self._acked:
            self.leave(job)
        elif not self.batched:
            self._settle_one(job)  # one id per call: no take waits (see take_of)
        elif self._group.post((job,), send=self._due(job)):
            self._on_settled()

    def send_soon(self, job: StorageJob, executor: Executor) -> None:
        """Like :meth:`send`, but a call it has to make runs on ``executor``: never blocks."""
        if not job.ack_id or not self._acked:
            self.leave(job, flush=False)
        elif not self.batched:
            with self._lock:
                self._unbatched += 1
            executor.submit(self._settle_one, job, True)
        else:
            due = self._due(job)
            self._group.post((job,), send=False)
            if due:
                executor.submit(self._flush)

    def leave(self, job: StorageJob, *, flush: bool = True) -> None:
        """``job`` was settled some other way (retried, dead-lettered, failed, given back,
        lost): its take has one job fewer to wait for. With ``flush``, acknowledgements that
        waited for it are sent now, in this thread; without, by their hold's end."""
        with self._lock:
            last = self._left_locked(job)
        if last and flush:
            self._flush()

    def send_held(self, now: float) -> float | None:
        """Send the held acknowledgements whose hold ran out by ``now``; when to look again
        (``None``: none is held)."""
        with self._lock:
            if self._held_until == math.inf:
                return None
            if now < self._held_until:
                return self._held_until
            self._held_until = math.inf
        self._flush()  # a call under way sends them too
        return None

    # -- inside ------------------------------------------------------------------------------

    @staticmethod
    def _left_locked(job: StorageJob) -> bool:
        """Count ``job`` out of its take, once; whether that was the take's last job."""
        take = job.take
        if take is None:
            return False
        job.take = None
        take.left -= 1
        return take.left <= 0

    def _due(self, job: StorageJob) -> bool:
        """Count ``job`` out of its take: whether its acknowledgement goes now, or waits for the
        rest of its take (its hold's end is then due at the renewal thread)."""
        with self._lock:
            take = job.take
            if self._left_locked(job) or take is None or time.monotonic() >= take.hold_until:
                return True
            if take.hold_until >= self._held_until:
                return False  # an earlier hold's end sends it too
            self._held_until = take.hold_until
        self._on_hold(take.hold_until)  # outside the lock: it wakes another thread
        return False

    def _flush(self) -> None:
        """Send what waits, unless a call under way sends it."""
        if self._group.flush():
            self._on_settled()

    def _settle_one(self, job: StorageJob, counted: bool = False) -> None:
        try:
            outcome: bool | BaseException = bool(self._storage.acknowledge(job.ack_id))
        except Exception as exc:
            outcome = exc
        self._check(job, outcome)
        if counted:
            with self._lock:
                self._unbatched -= 1
            self._on_settled()

    def _write(self, gather: Callable[[], list[StorageJob]]) -> list[bool]:
        """One call for the acknowledgements waiting; each failure reported, never raised."""
        batch = gather()
        try:
            if self._results:
                answers = self._storage.acknowledge_with_results(
                    [(j.ack_id, j.result) for j in batch]
                )
            else:
                answers = self._storage.acknowledge_many([j.ack_id for j in batch])
            results: list[bool | BaseException] = [bool(r) for r in answers]
            if len(results) != len(batch):
                raise RuntimeError(
                    f"acknowledge_many returned {len(results)} results for {len(batch)} ids"
                )
        except Exception as exc:
            results = [exc] * len(batch)
        for job, outcome in zip(batch, results, strict=True):
            self._check(job, outcome)
        return [outcome is True for outcome in results]

    def _check(self, job: StorageJob, outcome: bool | BaseException) -> None:
        if outcome is True:
            return
        if outcome is False and getattr(job, "handed_back", False):
            return  # refused because it was handed back while it ran: it runs again at once
        cause = outcome if isinstance(outcome, BaseException) else None
        self._report(AcknowledgeJobError(job.id, job.ack_id, cause, queue=self._label))


def take_of(jobs: Sequence[StorageJob], taken_at: float, lease: float) -> None:
    """Make ``jobs`` (taken together at ``taken_at``, under a lease of ``lease`` seconds) one
    :class:`Take`, so that their acknowledgements go in one call."""
    if len(jobs) < 2 or lease <= 0:
        return  # a lone job has nobody to wait for
    take = Take(len(jobs), taken_at + min(ACK_HOLD, lease / 10))
    for job in jobs:
        job.take = take


class LeaseRenewer:
    """The thread that renews the leases of one storage queue's jobs.

    ``renew(now)`` renews what is due and returns when to call it again (``None``: no lease
    held, sleep until poked). Started by the first :meth:`poke` after the jobs it renews were
    taken; it ends when told to stop (the worker stopped) or when nothing is left to renew.
    """

    def __init__(self, renew: Callable[[float], float | None], name: str) -> None:
        self._renew = renew
        self._name = name
        # Guards _running, _poked, _sleeping_until and _thread; _cv is notified when a renewal
        # may be due sooner. _poked is set by every poke that does not find the thread asleep
        # until soon enough, so one that comes while the thread renews (and so does not wait
        # on _cv) is not lost: the thread looks again before it sleeps.
        self._cv = threading.Condition(threading.Lock())
        self._running = False
        self._poked = False
        # While the thread waits on _cv: when it wakes on its own (inf: only when poked).
        # -inf while it renews.
        self._sleeping_until = -math.inf
        self._thread: threading.Thread | None = None

    def poke(self, due: float | None = None) -> None:
        """Jobs were taken under a lease, or something else is due at ``due`` (this process's
        monotonic clock; ``None``: unknown, look now): start the thread, or make it look
        again unless it already sleeps until no later than ``due``."""
        with self._cv:
            if self._running:
                if due is not None and due >= self._sleeping_until > -math.inf:
                    return  # it wakes by then anyway: no thread hand-off for each take
                self._poked = True
                self._cv.notify_all()
                return
            self._poked = True
            self._running = True
            thread = threading.Thread(target=self._main, name=self._name, daemon=True)
            self._thread = thread
        thread.start()

    def stop(self) -> None:
        """Ask the thread to end (it never joins: safe under any lock)."""
        with self._cv:
            self._running = False
            self._cv.notify_all()

    def _main(self) -> None:
        while True:
            with self._cv:
                self._poked = False
            next_due = self._renew(time.monotonic())
            with self._cv:
                if not self._running:
                    return
                if self._poked:
                    continue  # jobs were tracked while it renewed: their times are not seen yet
                if next_due is None:
                    self._sleeping_until = math.inf
                    self._cv.wait()
                else:
                    delay = next_due - time.monotonic()
                    if delay > 0:
                        self._sleeping_until = next_due
                        self._cv.wait(delay)
                self._sleeping_until = -math.inf
