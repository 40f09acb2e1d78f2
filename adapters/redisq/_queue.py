"""Queue objects of redisq: FIFO and priority queues stored in Redis, with leased takes.

Each method is one call of ``queue.lua`` (see its header for the key layout and invariant), so every
method is atomic on the server and safe from any thread. A method whose call Redis does not answer
raises :class:`~redisq.errors.RedisUnavailableError` (a ``ConnectionError``) within the client's
timeouts, so that ``False`` / ``None`` / ``[]`` / ``0`` are always Redis's own answer ("refused or
fenced", "nothing to take", "nothing waits"); the first failure of an outage is also logged once
(``redisq`` logger). After ``Queues.close()`` nothing reaches Redis and the methods return those
"nothing" values. Bad arguments raise ``TypeError``/``ValueError``, before anything reaches Redis,
by the rules of :mod:`varmq.contract.rules`. The distributed variants live in
:mod:`redisq._distributed`.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal

from varmq.contract.batching import GroupCommit
from varmq.contract.protocols import DeadLetterRecord, QueueStats, RateStats, StoredJobRecord
from varmq.contract.rules import (
    QueueSettings,
    as_bytes,
    check,
    check_job_id,
    check_keys,
    delay_ms,
    error_text,
    occurrence_mark,
    payload,
)

from ._adds import MAX_BATCH, ROUNDS, AddCommand, Sender, Triple
from ._aio import AsyncAdds, threads
from ._keys import queue_keys
from ._script import FAILED, ScriptRunner
from ._workers import WorkerRegistry

if TYPE_CHECKING:
    from ._pubsub import Listener

__all__ = ["PriorityQueue", "Queue"]

FIFO: Final = "fifo"
PRIORITY: Final = "priority"

# Expired leases a take moves back to ready before it pops; bounds the work of one call while
# still recovering faster than any taker can take.
_RECOVER_PER_CALL: Final = 100
# Payloads per script call of enqueue_many: one call blocks Redis while it runs, so a long batch
# is cut into calls of this size.
_ENQUEUE_MANY_CHUNK: Final = 1000
# The most a count the script passes on to a Redis command may be: Lua numbers are doubles,
# and Redis reads a count beyond 2**53 as no integer at all.
_MAX_SCRIPT_COUNT: Final = 2**31 - 1
# The common priorities, encoded once.
_PRIORITIES: Final = {n: b"%d" % n for n in range(-10, 11)}


class _StoredQueue:
    """Everything a FIFO and a priority queue share; ``enqueue`` is defined by the subclasses."""

    KIND: str = FIFO
    NOTIFIES: ClassVar[bool] = False  # whether enqueues publish "enqueued" on the channel
    #: The worker records of the Redis (``IHasWorkerRegistry``), set by the opener.
    worker_registry: WorkerRegistry

    def __init__(
        self, name: str, runner: ScriptRunner, listener: Listener, settings: QueueSettings
    ) -> None:
        self._subject = f"redisq: queue {name!r} on {runner.health.where}"  # starts each error
        self._dead_letter_limit = settings.dead_letter_limit
        self._dead_letter_max_age_ms = round(settings.dead_letter_max_age * 1000)
        self._keys = queue_keys(name)
        self._name = name
        self._runner = runner
        self._listener = listener
        self._lease_seconds = float(settings.visibility_timeout)
        self._lease_ms = max(1, round(settings.visibility_timeout * 1000))
        self._channel = self._keys.channel if self.NOTIFIES else ""
        # Only ever goes from False to True; a plain attribute is enough for that.
        self._closed = False
        # Waiting jobs beyond which this object refuses enqueues; 0 = unlimited. Per object:
        # other processes' queue objects on the same name keep their own setting.
        self._capacity = 0
        # Job records: the keep_results of this object (0: it adds jobs without records) and
        # the keep_results_limit it applies to the ends it makes.
        self._keep_results = float(settings.keep_results)
        self._max_payload = settings.max_payload
        self._keep_ms = round(settings.keep_results * 1000) if settings.keep_results > 0 else 0
        self._records_limit = min(settings.keep_results_limit, _MAX_SCRIPT_COUNT)
        self._rate_limit = settings.rate_limit
        # The take's rate arguments (count, window ms; "0" for none) and the wait its last
        # limited take reported (seconds; a float write is atomic).
        if settings.rate_limit is None:
            self._rate_args: tuple[int, int] = (0, 0)
        else:
            self._rate_args = (settings.rate_limit[0], max(1, round(settings.rate_limit[1] * 1000)))
        self._throttled_for = 0.0
        # Protects _closed's flip and _listening: the (channel, callback) pairs this object
        # subscribed through the listener, dropped on close.
        self._subscribers_lock = threading.Lock()
        self._listening: list[tuple[str, Callable[[str], None]]] = []
        # Adds available now go through the group commit of this object (redisq._adds).
        self._add_command = AddCommand(self._keys.keys, self.KIND, self._channel, self._keep_ms)
        self._sender = Sender(runner, name, self._add_command)
        self._group: GroupCommit[Triple, int] = GroupCommit(
            self._write_adds, max_batch=MAX_BATCH, rounds=ROUNDS
        )
        self._async_adds = AsyncAdds(
            runner, name, self._add_command, self._get_capacity, self._codes, self._send_adds
        )

    def __repr__(self) -> str:
        return f"<redisq.{type(self).__name__} {self._name!r} on {self._runner.health.where}>"

    @property
    def name(self) -> str:
        """The queue name, as given to ``Queues.new_*``."""
        return self._name

    @property
    def lease_seconds(self) -> float:
        """How long a lease lasts after a take or an extension (the visibility timeout)."""
        return self._lease_seconds

    @property
    def keep_results(self) -> float:
        """Seconds an ended job's record is kept; ``0.0``: this object adds jobs without
        records (it still reads and cancels the records the queue keeps)."""
        return self._keep_results

    def _run(self, command: str, *args: bytes | str | int) -> Any:
        return self._runner.run(self._name, self._keys.keys, command, *args)

    def _listen(
        self,
        channel: str,
        callback: Callable[[str], None],
        missed: Callable[[], None] | None = None,
    ) -> None:
        """Subscribe ``callback`` to ``channel`` through the listener until :meth:`close`
        (``missed()`` after each reconnection); raises ``RedisUnavailableError`` (keeping
        nothing) when Redis does not confirm."""
        with self._subscribers_lock:
            if self._closed:
                return
            self._listening.append((channel, callback))
        failure = self._listener.subscribe(channel, callback, missed)
        if failure is None:
            return
        with self._subscribers_lock:
            if (channel, callback) in self._listening:
                self._listening.remove((channel, callback))
        raise self._runner.health.failed(self._name, "subscribe", failure) from failure

    # -- adding --------------------------------------------------------------------------

    def _store(self, item: Any, priority: int, job_id: str, wait_ms: int = 0) -> bool:
        """Store the checked ``item``; callers check ``priority``, ``job_id`` and the delay."""
        if wait_ms <= 0:
            triple = self._triple(item, priority, job_id)
            return False if self._closed else self._group.submit((triple,))[0] > 0
        return self._enqueue_one(item, priority, job_id, wait_ms)

    def _enqueue_one(
        self, item: Any, priority: int, job_id: str, wait_ms: int, *mark: str | int
    ) -> bool:
        """One ``enqueue`` script call, not group-committed: a delayed job, or a schedule's
        occurrence (``mark``: its schedule and time in ms)."""
        data = payload(self._subject, item, self._max_payload)
        if self._closed:
            return False
        result = self._run(
            "enqueue",
            self.KIND,
            priority,
            data,
            self._channel,
            job_id,
            self._capacity,
            wait_ms,
            self._keep_ms,
            *mark,
        )
        if result == -1:
            self._warn_kind()
            return False
        return result in (1, 2)

    def _triple(self, item: Any, priority: int, job_id: str) -> Triple:
        """One add as the script's ``add`` takes it; checks ``item``."""
        data = payload(self._subject, item, self._max_payload)
        return (_PRIORITIES.get(priority) or b"%d" % priority, job_id.encode(), data)

    async def _store_async(self, item: Any, priority: int, job_id: str, wait_ms: int) -> bool:
        """:meth:`_store` for a coroutine (redisq._aio); a delayed job through a thread."""
        if wait_ms > 0:
            store = self._store
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(threads(), store, item, priority, job_id, wait_ms)
        triple = self._triple(item, priority, job_id)
        if self._closed:
            return False
        return await self._async_adds.add(triple) > 0

    def _get_capacity(self) -> int:
        return self._capacity

    def _write_adds(self, gather: Callable[[], list[Triple]]) -> list[int]:
        """One write of the group commit: the adds waiting now, in one call."""
        return self._send_adds(gather())

    def _send_adds(self, triples: list[Triple]) -> list[int]:
        """One group-commit round: the answer code of each add (1, 2 stored; 0 refused)."""
        return self._codes(self._sender.send(self._capacity, triples), len(triples))

    def _codes(self, result: Any, n: int) -> list[int]:
        """The answer code of each of ``n`` adds in the reply of one ``add`` call."""
        if result is FAILED:
            return [0] * n
        if not isinstance(result, list):  # -1: the queue is of the other kind
            self._warn_kind()
            return [0] * n
        return result

    def _store_many(self, items: Iterable[Any], priority: int) -> int:
        payloads = [payload(self._subject, item, self._max_payload) for item in items]
        if self._closed:
            return 0
        stored = 0
        for start in range(0, len(payloads), _ENQUEUE_MANY_CHUNK):
            chunk = payloads[start : start + _ENQUEUE_MANY_CHUNK]
            result = self._run(
                "enqueue_many", self.KIND, priority, self._channel, self._capacity, *chunk
            )
            if result is FAILED or int(result) < 0:
                if result is not FAILED:
                    self._warn_kind()
                break
            stored += int(result)
            if int(result) < len(chunk):
                break  # capacity reached
        return stored

    def _rank(self, priority: Any) -> int:
        """The priority to store for the optional ``priority`` argument: 0 on a FIFO queue."""
        return 0

    def _priority(self, priority: Any) -> int:
        """A priority queue's checked priority."""
        return int(check(self._subject, "priority", priority))

    def _warn_kind(self) -> None:
        self._runner.health.warn_once(
            ("kind", self._name),
            f"redisq: queue {self._name!r} now exists as a queue of the other kind than "
            f"{self.KIND}; enqueues are refused",
        )

    def set_capacity(self, capacity: int) -> None:
        """Refuse enqueues through this object once ``capacity`` jobs wait (0: unlimited).

        Checked inside the enqueue script, so it holds with several producers at once.
        """
        check(self._subject, "capacity", capacity)
        self._capacity = capacity

    def enqueue_occurrence(
        self,
        item: Any,
        job_id: str,
        schedule: str,
        occurrence: float,
        priority: int | None = None,
    ) -> bool:
        """``enqueue_dedup`` unless the queue's mark of ``schedule`` is at or after
        ``occurrence``, the mark moved in the same script call (``IScheduleMarks``; the
        ``mark:<schedule>`` field of the queue's meta hash)."""
        rank = self._rank(priority)
        job_id = check_job_id(self._subject, job_id)
        mark = occurrence_mark(self._subject, schedule, occurrence)
        return self._enqueue_one(item, rank, job_id, 0, *mark)

    def enqueue_dedup(self, item: Any, job_id: str, priority: int | None = None) -> bool:
        """Store ``item`` unless a job with ``job_id`` is still stored (waiting or in flight).

        ``True`` in both cases; ``False`` when refused. FIFO queues ignore ``priority``; a
        priority queue treats ``None`` as 0.
        """
        rank = self._rank(priority)
        return self._store(item, rank, check_job_id(self._subject, job_id))

    def enqueue_delayed(
        self, item: Any, delay: float, job_id: str | None = None, priority: int | None = None
    ) -> bool:
        """Store ``item``; it is not handed out before ``delay`` seconds from now.

        The delay becomes an absolute deadline on the Redis clock (or the ``clock`` hook), so it
        survives restarts. Once due, the job joins the end of its priority's line as of its due
        time. ``delay <= 0`` means available now. With a ``job_id``, deduplicates like
        :meth:`enqueue_dedup` (a delayed job counts as stored). FIFO queues ignore ``priority``;
        a priority queue treats ``None`` as 0.
        """
        rank = self._rank(priority)
        dedup = "" if job_id is None else check_job_id(self._subject, job_id)
        return self._store(item, rank, dedup, delay_ms(self._subject, delay))

    async def enqueue_dedup_async(
        self, item: Any, job_id: str, priority: int | None = None
    ) -> bool:
        """:meth:`enqueue_dedup` for a coroutine, without blocking its event loop."""
        rank = self._rank(priority)
        return await self._store_async(item, rank, check_job_id(self._subject, job_id), 0)

    async def enqueue_delayed_async(
        self, item: Any, delay: float, job_id: str | None = None, priority: int | None = None
    ) -> bool:
        """:meth:`enqueue_delayed` for a coroutine, without blocking its event loop."""
        rank = self._rank(priority)
        dedup = "" if job_id is None else check_job_id(self._subject, job_id)
        return await self._store_async(item, rank, dedup, delay_ms(self._subject, delay))

    # -- taking --------------------------------------------------------------------------

    def __len__(self) -> int:
        """Jobs available to take now (waiting, or with an expired lease); 0 once closed."""
        if self._closed:
            return 0
        result = self._run("len")
        return 0 if result is FAILED else int(result)

    def dequeue(self) -> bytes | None:
        """Take one job for good, without a lease; ``None`` when there is nothing to take."""
        if self._closed:
            return None
        result = self._run("dequeue", _RECOVER_PER_CALL, self._records_limit, *self._rate_args)
        return None if result is FAILED or result is None else bytes(result)

    def dequeue_batch_with_attempts(self, n: int) -> list[tuple[bytes, str, int]]:
        """Take and lease up to ``n`` jobs in one step: ``(payload, ack id, delivery count)``."""
        check(self._subject, "n", n)
        if self._closed or n < 1:
            return []
        prefix = secrets.token_hex(12)
        count = min(n, _MAX_SCRIPT_COUNT)
        result = self._run(
            "take",
            count,
            self._lease_ms,
            prefix,
            _RECOVER_PER_CALL,
            self._records_limit,
            *self._rate_args,
        )
        if result is FAILED:
            return []
        if self._rate_limit is not None:
            self._throttled_for = int(result[0]) / 1000.0
            result = result[1:]
        return [
            (bytes(result[i]), _text(result[i + 1]), int(result[i + 2]))
            for i in range(0, len(result), 3)
        ]

    def dequeue_batch_with_ack_ids(self, n: int) -> list[tuple[bytes, str]]:
        """Take and lease up to ``n`` jobs in one step, each with its own ack id."""
        return [(payload, ack) for payload, ack, _ in self.dequeue_batch_with_attempts(n)]

    def dequeue_with_ack_id(self) -> tuple[bytes, str] | None:
        """Take and lease one job; ``None`` when there is nothing to take."""
        taken = self.dequeue_batch_with_attempts(1)
        return (taken[0][0], taken[0][1]) if taken else None

    # -- finishing -----------------------------------------------------------------------

    def acknowledge_many(self, ack_ids: Sequence[str]) -> list[bool]:
        """Forget the jobs leased under ``ack_ids`` in one round trip; one result per id.

        ``False`` for an id that is unknown, already acknowledged, or whose lease expired.
        Works after :meth:`close`, so jobs taken before it can still finish.
        """
        tokens = list(ack_ids)
        if not tokens:
            return []
        if not all(isinstance(token, str) for token in tokens):
            return [isinstance(t, str) and self.acknowledge(t) for t in tokens]
        result = self._run("ack", self._records_limit, "0", *tokens)
        if result is FAILED:
            return [False] * len(tokens)
        return [bool(flag) for flag in result]

    def acknowledge_with_results(self, results: Sequence[tuple[str, Any]]) -> list[bool]:
        """Acknowledge each ``(ack_id, result)`` and record its job ``"succeeded"`` with the
        ``result`` bytes, all in one script call (fenced like :meth:`acknowledge_many`); one
        answer per pair. Every result is checked before anything reaches Redis. Works after
        :meth:`close`."""
        pairs = [(ack_id, as_bytes(self._subject, r, "result")) for ack_id, r in results]
        sent = [(ack_id, result) for ack_id, result in pairs if isinstance(ack_id, str)]
        if not sent:
            return [False] * len(pairs)
        flat: list[bytes | str] = []
        for ack_id, result in sent:
            flat += (ack_id, result)
        reply = self._run("ack", self._records_limit, "1", *flat)
        answers = iter([False] * len(sent) if reply is FAILED else [bool(f) for f in reply])
        return [isinstance(ack_id, str) and next(answers) for ack_id, _ in pairs]

    def fail(self, ack_id: str, error: Any) -> bool:
        """End the job leased under ``ack_id`` for good, recording it ``"failed"`` with the
        ``error`` bytes (``"cancelled"`` when a cancel was requested), in one script call.

        ``False`` when the lease is unknown, expired or taken over. Works after :meth:`close`.
        """
        detail = as_bytes(self._subject, error, "error")
        if not isinstance(ack_id, str):
            return False
        result = self._run("fail", ack_id, detail, self._records_limit)
        return result is not FAILED and bool(result)

    def acknowledge(self, ack_id: str) -> bool:
        """Forget the job leased under ``ack_id``; ``False`` if the id is unknown or expired."""
        return self.acknowledge_many([ack_id])[0]

    def extend_lease(self, ack_id: str) -> bool:
        """Restart the lease of ``ack_id``; ``False`` when it was lost (expired, taken over)."""
        if not isinstance(ack_id, str):
            return False
        result = self._run("extend", self._lease_ms, ack_id)
        return result is not FAILED and bool(result)

    def extend_lease_or_cancel(self, ack_id: str) -> Literal["held", "lost", "cancel"]:
        """:meth:`extend_lease` that also says whether a cancel of the job was requested:
        ``"held"``, ``"cancel"`` (extended all the same) or ``"lost"``."""
        if not isinstance(ack_id, str):
            return "lost"
        result = self._run("extend", self._lease_ms, ack_id)
        if result is FAILED or not result:
            return "lost"
        return "cancel" if int(result) == 2 else "held"

    def nack(self, ack_id: str, delay: float) -> bool:
        """Give the job leased under ``ack_id`` back, available again after ``delay`` seconds.

        It keeps its priority and delivery count (the next take counts one more) and joins the
        end of its line when due. ``False`` when the lease is unknown, expired or taken over.
        Works after :meth:`close`, like :meth:`acknowledge`.
        """
        wait_ms = delay_ms(self._subject, delay)
        if not isinstance(ack_id, str):
            return False
        result = self._run("nack", ack_id, wait_ms, self._channel, self._records_limit)
        return result is not FAILED and bool(result)

    def release(self, ack_id: str) -> bool:
        """Give back the job leased under ``ack_id``, never started, available again at once.

        In one script call: the job goes back to its own place in line (same priority, same
        job id, as when a lease expires), its delivery count drops by one (the next take
        reports the same attempt again), and a distributed queue publishes "enqueued".
        ``False`` when the lease is unknown, expired or taken over. Works after :meth:`close`,
        like :meth:`acknowledge`.
        """
        if not isinstance(ack_id, str):
            return False
        result = self._run("release", ack_id, self._channel, self._records_limit)
        return result is not FAILED and bool(result)

    # -- dead letters --------------------------------------------------------------------

    def dead_letter(self, ack_id: str, error: str) -> bool:
        """Move the job leased under ``ack_id`` onto this queue's dead-letter shelf, atomically.

        Records the payload, its delivery count, ``error`` and the time. In the same step, drops
        dead letters older than ``dead_letter_max_age`` and the oldest beyond
        ``dead_letter_limit`` (up to 100 of each per call). ``False`` when the lease is unknown,
        expired or taken over.
        """
        return self._bury(ack_id, error, None)

    def dead_letter_with_error(self, ack_id: str, error: str, record_error: Any) -> bool:
        """:meth:`dead_letter` that also records ``record_error`` (bytes) as the error of the
        job's ``"dead"`` record, in the same script call."""
        return self._bury(ack_id, error, as_bytes(self._subject, record_error, "record_error"))

    def _bury(self, ack_id: str, error: str, detail: bytes | None) -> bool:
        if not isinstance(ack_id, str):
            return False
        result = self._run(
            "dead_letter",
            ack_id,
            error_text(error),
            self._dead_letter_limit,
            self._dead_letter_max_age_ms,
            "0" if detail is None else "1",
            b"" if detail is None else detail,
            self._records_limit,
        )
        return result is not FAILED and bool(result)

    def dead_letters(self, limit: int = 100) -> list[DeadLetterRecord]:
        """Up to ``limit`` dead letters, oldest first (``dead_at`` in Unix seconds)."""
        check(self._subject, "limit", limit)
        if limit == 0:
            return []
        result = self._run("dead_letters", min(limit, _MAX_SCRIPT_COUNT))
        if result is FAILED:
            return []
        letters: list[DeadLetterRecord] = []
        for i in range(0, len(result), 4):
            attempts, error = _parse_info(bytes(result[i + 3]))
            letters.append(
                {
                    "key": _text(result[i]),
                    "item": bytes(result[i + 2]),
                    "attempts": attempts,
                    "error": error,
                    "dead_at": int(result[i + 1]) / 1000.0,
                }
            )
        return letters

    def requeue_dead(self, keys: Sequence[str] | None = None) -> int:
        """Put dead letters back in line (all when ``keys`` is ``None``); how many.

        Each becomes available now at the end of its priority's line, with its delivery count
        reset (the next take is attempt 1). Unknown keys are ignored.
        """
        chosen = check_keys(self._subject, keys)
        if chosen is None:
            result = self._run("requeue_dead", self._channel, self._keep_ms, "all")
        elif not chosen:
            return 0
        else:
            result = self._run("requeue_dead", self._channel, self._keep_ms, "some", *chosen)
        return 0 if result is FAILED else int(result)

    def purge_dead(self) -> int:
        """Delete every dead letter of this queue; how many there were."""
        result = self._run("purge_dead")
        return 0 if result is FAILED else int(result)

    # -- inspecting ----------------------------------------------------------------------

    def values(self) -> list[bytes]:
        """A snapshot of the waiting jobs, in the order they would be taken; ``[]`` once closed."""
        if self._closed:
            return []
        result = self._run("values")
        if result is FAILED:
            return []
        rows = [
            (float(result[i + 1]), _text(result[i]), bytes(result[i + 2]))
            for i in range(0, len(result), 3)
        ]
        rows.sort(key=lambda row: (row[0], row[1]))
        return [payload for _, _, payload in rows]

    def stats(self) -> QueueStats:
        """Counts from Redis, in one call: ``waiting``, ``in_flight``, ``delayed``, ``dead``,
        ``oldest_age`` (seconds since the oldest waiting job became available; 0.0 if none).

        All zeros once ``Queues`` is closed; raises ``RedisUnavailableError`` while Redis
        cannot answer, never made-up zeros.
        """
        result = self._run("stats", self._rate_args[1])
        if result is FAILED:
            return {"waiting": 0, "in_flight": 0, "delayed": 0, "dead": 0, "oldest_age": 0.0}
        waiting, in_flight, delayed, dead, oldest, now, used = (int(value) for value in result)
        stats: RateStats = {
            "waiting": waiting,
            "in_flight": in_flight,
            "delayed": delayed,
            "dead": dead,
            "oldest_age": max(0.0, (now - oldest) / 1000.0) if oldest >= 0 else 0.0,
        }
        if self._rate_limit is not None:
            stats["rate_window_used"] = used
            stats["throttled"] = used >= self._rate_limit[0] and waiting > 0
        return stats

    @property
    def rate_limit(self) -> tuple[int, float] | None:
        """``(count, seconds)``: at most ``count`` jobs start in any window of ``seconds``,
        across every consumer of the server; ``None``: no limit."""
        return self._rate_limit

    def throttled_for(self) -> float:
        """Seconds until the rate window lets another job start, as this object's last take
        saw it (0.0 unless the limit cut that take short)."""
        return self._throttled_for

    def purge(self) -> None:
        """Remove every waiting job (jobs in flight, delayed jobs not yet due and dead letters
        stay).

        Does nothing once the queue is closed.
        """
        if not self._closed:
            self._run("purge", self._records_limit)

    # -- job records ---------------------------------------------------------------------

    def job_record(self, job_id: str) -> StoredJobRecord | None:
        """The record of ``job_id`` (times in Unix seconds on the Redis clock), or ``None``
        when the queue keeps none, whatever this object's own ``keep_results``."""
        job_id = check_job_id(self._subject, job_id)
        reply = self._run("job_record", job_id, self._records_limit)
        if reply is FAILED or not reply:
            return None
        record = _record(job_id, bytes(reply[0]), bytes(reply[2]) if int(reply[1]) else None)
        record["progress"] = bytes(reply[4]) if int(reply[3]) else None
        return record

    def set_progress(self, ack_id: str, progress: Any) -> bool:
        """Store ``progress`` (bytes, or str as UTF-8) as the progress of the record of the job
        leased under ``ack_id``, in one script call that changes nothing else (a field of the
        records hash, see ``queue.lua``). ``False`` (nothing stored) when the lease is unknown,
        expired or taken over, or the job has no record. The next take of the job clears it;
        the ended record keeps it. Works after :meth:`close`."""
        kept = as_bytes(self._subject, progress, "progress")
        if not isinstance(ack_id, str):
            return False
        result = self._run("progress", ack_id, kept)
        return result is not FAILED and bool(result)

    def cancel(self, job_id: str) -> bool:
        """Cancel ``job_id``: a queued or delayed job is removed at once (``"cancelled"``), a
        running one is flagged for its consumer (``extend_lease_or_cancel``). Whether there was
        a job to cancel: ``False`` for an unknown id or an ended job."""
        job_id = check_job_id(self._subject, job_id)
        result = self._run("cancel", job_id, self._records_limit)
        return result is not FAILED and bool(result)

    def subscribe_records(self, callback: Callable[[str | None], None]) -> None:
        """Call ``callback(job_id)`` after a record of this queue ended, through any object in
        any process (the queue's "ended" channel, on the ``Queues``'s one pub/sub connection).

        Returns once Redis confirmed the subscription; lossy like Redis pub/sub. Raises
        :class:`~redisq.errors.RedisUnavailableError` when Redis does not confirm. Ignored
        once the queue is closed; subscriptions end with :meth:`close`.
        """

        def batch(message: str) -> None:
            # An acknowledgement that ended several records tells them in one message.
            for job_id in json.loads(message):
                callback(job_id)

        # Ends published while the connection was down are lost: None tells the waiters to
        # read their records again (once: both channels come back on the one connection).
        self._listen(self._keys.records_channel, callback, lambda: callback(None))
        self._listen(self._keys.records_batch_channel, batch)

    def close(self) -> None:
        """Refuse further enqueues and takes and stop calling this object's subscribers;
        stored jobs stay, taken jobs can still be acked."""
        with self._subscribers_lock:
            self._closed = True
            listening, self._listening = self._listening, []
        for channel, callback in listening:
            self._listener.unsubscribe(channel, callback)
        self._sender.close()
        self._async_adds.close()


class Queue(_StoredQueue):
    """A FIFO queue in Redis (``IPersistentQueue`` and the lease, batch and dedup extensions)."""

    KIND = FIFO

    def enqueue(self, item: Any) -> bool:
        """Store ``item`` (bytes, or str as UTF-8) last in line; ``False`` when refused."""
        return self._store(item, 0, "")

    async def enqueue_async(self, item: Any) -> bool:
        """:meth:`enqueue` for a coroutine: ``redis.asyncio`` on its event loop, concurrent
        adds of the loop sent together (:mod:`redisq._aio`)."""
        return await self._store_async(item, 0, "", 0)

    def enqueue_many(self, items: Iterable[Any]) -> int:
        """Store ``items`` last in line, in order, in few round trips; how many were stored.

        Sent in script calls of 1,000 items, each atomic. The count is short of ``len(items)``
        when the capacity was reached (the first items that fit are stored) or Redis failed.
        An item that is neither bytes nor str raises ``TypeError`` before anything is stored.
        Distributed queues notify once per call, not once per item.
        """
        return self._store_many(items, 0)


class PriorityQueue(_StoredQueue):
    """A priority queue in Redis: lower numbers first, first in first out among equals."""

    KIND = PRIORITY

    def enqueue(self, item: Any, priority: int) -> bool:
        """Store ``item`` with ``priority`` (an int within +-2**53); ``False`` if refused."""
        return self._store(item, self._priority(priority), "")

    async def enqueue_async(self, item: Any, priority: int) -> bool:
        """:meth:`enqueue` for a coroutine (see :meth:`Queue.enqueue_async`)."""
        return await self._store_async(item, self._priority(priority), "", 0)

    def enqueue_many(self, items: Iterable[Any], priority: int) -> int:
        """Store ``items`` with one ``priority``, in order, in few round trips; how many.

        Same rules as :meth:`Queue.enqueue_many`.
        """
        return self._store_many(items, self._priority(priority))

    def _rank(self, priority: Any) -> int:
        return 0 if priority is None else self._priority(priority)


def _record(job_id: str, text: bytes, outcome: bytes | None) -> StoredJobRecord:
    """A record of KEYS[15] (format in queue.lua's header) as ``job_record`` returns it."""
    state, attempts, enqueued, started, finished, cancel, _keep, _ref = text.decode().split(" ")
    ok = state == "succeeded"
    return {
        "id": job_id,
        "state": state,
        "attempts": int(attempts),
        "result": outcome if ok else None,
        "error": None if ok else outcome,
        "enqueued_at": int(enqueued) / 1000.0,
        "started_at": None if started == "-" else int(started) / 1000.0,
        "finished_at": None if finished == "-" else int(finished) / 1000.0,
        "cancel_requested": cancel == "1",
    }


def _parse_info(info: bytes) -> tuple[int, str]:
    """Attempts and error text of a dead_info value (format in queue.lua's header)."""
    attempts, _priority, length, rest = info.split(b" ", 3)
    return int(attempts), rest[int(length) :].decode("utf-8", "replace")


def _text(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value
