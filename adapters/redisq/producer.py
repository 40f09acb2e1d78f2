"""Producers' adds: group commit of concurrent adds into one call of ``queue.lua``'s ``add``.

One add alone is written at once: a caller that finds no write of its queue object in flight
becomes the *leader* and sends its own job. Callers arriving while a write is in flight queue up
as *followers*; when the write returns, the first of them leads the next round trip with all
of them (up to :data:`MAX_BATCH`), while the previous leader hands every one of its followers
its own answer. Nothing ever waits for a batch to fill, and each caller learns exactly what
happened to its own job: stored, already stored (dedup), refused, or the exception of its
batch's call (a batch is one atomic script call: it was stored as a whole or not at all).

The command is packed here, once per batch, from parts encoded once per queue object, and sent
on a connection this queue object keeps (plain Redis): no per-call command parsing, pool
checkout or reply callbacks. Cluster clients go through :class:`~redisq.script.ScriptRunner`.
The async transport (:mod:`redisq.aio`) sends the same packed command.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Final

from redis import Redis
from redis.exceptions import NoScriptError

from redisq.errors import FAILURES
from redisq.script import FAILED, SCRIPT_SHA, SCRIPT_TEXT, Failed, ScriptRunner

__all__ = ["MAX_BATCH", "AddCommand", "GroupCommit", "Triple", "bulk"]

# The keys of a plain add, by their index in the queue's keys (KEYS order of queue.lua): meta,
# ready, payloads, priorities, seq.
_PLAIN_KEYS: Final = (0, 1, 2, 3, 9)
# Adds per script call: one call blocks Redis while it runs, like enqueue_many's chunks.
MAX_BATCH: Final = 1000
# Rounds a leader sends before it hands the lead on: each round it keeps saves a thread wake-up,
# each one delays its own caller by a round trip.
_ROUNDS: Final = 4

# (priority, caller's job id or b"", payload), already bytes: one add as the script takes it.
Triple = tuple[bytes, bytes, bytes]
# What one batch's call answers: one code per add (1 stored, 2 dedup hit, 0 refused), -1 for the
# whole batch when the queue is of the other kind, FAILED after Queues.close().
Answers = Sequence[int] | int | Failed


def bulk(value: bytes) -> bytes:
    """``value`` as a RESP bulk string."""
    return b"$%d\r\n%b\r\n" % (len(value), value)


class AddCommand:
    """The ``add`` call of one queue object, packed for the wire: the fixed parts are encoded
    once, each batch adds its clock, capacity and triples."""

    def __init__(self, keys: Sequence[str], kind: str, channel: str, keep_ms: int) -> None:
        self.keys = tuple(keys)
        self.kind = kind
        self.channel = channel
        self.keep_ms = keep_ms
        # Plain adds (no job ids, no capacity) need five keys only (queue.lua, "add").
        self.plain_keys = tuple(self.keys[i] for i in _PLAIN_KEYS)
        self._heads = {
            chosen: (
                bulk(b"EVALSHA")
                + bulk(SCRIPT_SHA.encode())
                + bulk(b"%d" % len(chosen))
                + b"".join(bulk(key.encode()) for key in chosen)
                + bulk(b"add")
            )
            for chosen in (self.keys, self.plain_keys)
        }
        self._middle = bulk(kind.encode()) + bulk(channel.encode())
        self._tail = bulk(b"%d" % keep_ms)

    def keys_for(self, capacity: int, triples: Sequence[Triple]) -> tuple[str, ...]:
        """The keys an ``add`` of ``triples`` is sent with: five for plain adds, else all."""
        if capacity == 0 and all(not job_id for _, job_id, _ in triples):
            return self.plain_keys
        return self.keys

    def pack(self, now: str, capacity: int, triples: Sequence[Triple]) -> bytes:
        """The whole EVALSHA command for ``triples``, ready to send."""
        keys = self.keys_for(capacity, triples)
        parts = [
            b"*%d\r\n" % (3 + len(keys) + 6 + 3 * len(triples)),  # EVALSHA sha n, keys, ARGV
            self._heads[keys],
            bulk(now.encode()),
            self._middle,
            bulk(b"%d" % capacity),
            self._tail,
        ]
        for priority, job_id, payload in triples:
            parts.append(bulk(priority))
            parts.append(bulk(job_id))
            parts.append(bulk(payload))
        return b"".join(parts)

    def args(self, capacity: int, triples: Sequence[Triple]) -> list[bytes | str | int]:
        """The ARGV after ``add`` and the clock, for :meth:`ScriptRunner.run`."""
        flat: list[bytes | str | int] = [self.kind, self.channel, capacity, self.keep_ms]
        for triple in triples:
            flat.extend(triple)
        return flat


class _Caller:
    """One follower's add: what it sends, what it is told, and the gate it waits at."""

    __slots__ = ("answer", "batch", "error", "gate", "triple")

    def __init__(self, triple: Triple) -> None:
        self.triple = triple
        self.answer = 0
        self.error: BaseException | None = None
        # Set when this caller is to lead the next round: the callers of that round.
        self.batch: list[_Caller] | None = None
        self.gate = threading.Lock()
        self.gate.acquire()  # released once, by whoever answers this caller or makes it lead


class GroupCommit:
    """Leader/follower group commit of one queue object's adds (sync callers, any thread).

    ``send(triples)`` writes one batch and returns one answer code per triple (or raises);
    it is only ever called by one thread at a time.
    """

    def __init__(self, send: Callable[[list[Triple]], Sequence[int]]) -> None:
        self._send = send
        self._forked()
        _LIVE.add(self)

    def _forked(self) -> None:
        """A fresh state: at creation, and in a forked child (the threads of a write in flight
        when the process forked do not exist there, nor do its followers)."""
        # Protects _busy and _waiting. _busy: a leader is writing (or about to); _waiting: the
        # followers for the next round, in arrival order.
        self._lock = threading.Lock()
        self._busy = False
        self._waiting: list[_Caller] = []

    def add(self, triple: Triple) -> int:
        """Write ``triple`` (at once, or with the adds that arrive while a write is in flight);
        its own answer code, or the exception of its batch's call."""
        with self._lock:
            if self._busy:
                me: _Caller | None = _Caller(triple)
                self._waiting.append(me)  # type: ignore[arg-type]
            else:
                self._busy = True
                me = None
        if me is None:
            return self._lead(None, [triple])
        me.gate.acquire()  # answered, or made the next leader
        if me.batch is not None:
            return self._lead(me, [caller.triple for caller in me.batch])
        if me.error is not None:
            raise me.error
        return me.answer

    def _lead(self, me: _Caller | None, triples: list[Triple]) -> int:
        """Send this caller's round, then (while others wait, up to :data:`_ROUNDS` rounds)
        theirs too; then hand the lead on. Answers every follower of every round it sent."""
        batch = me.batch if me is not None and me.batch is not None else None
        followers = batch[1:] if batch is not None else []
        mine: int | BaseException = 0
        for round_ in range(_ROUNDS):
            error: BaseException | None = None
            answers: Sequence[int] = ()
            try:
                answers = self._send(triples)
                if len(answers) != len(triples):
                    raise RuntimeError(f"redisq: {len(answers)} answers for {len(triples)} adds")
            except BaseException as exc:  # every caller of the batch is told
                error = exc
            if round_ == 0:
                mine = error if error is not None else answers[0]
                start = 1
            else:
                start = 0
            for index, caller in enumerate(followers, start):
                caller.answer = 0 if error is not None else answers[index]
                caller.error = error
                caller.gate.release()
            waiting = self._next_round()
            if not waiting:
                break
            if round_ == _ROUNDS - 1:
                waiting[0].batch = waiting  # the first of them leads the next round
                waiting[0].gate.release()
                break
            followers = waiting
            triples = [caller.triple for caller in followers]
        if isinstance(mine, BaseException):
            raise mine
        return mine

    def _next_round(self) -> list[_Caller]:
        """The callers of the next round, taken off the waiting list; none ends the busy
        state (the next caller writes at once)."""
        with self._lock:
            waiting = self._waiting[:MAX_BATCH]
            del self._waiting[:MAX_BATCH]
            if not waiting:
                self._busy = False
            return waiting


class Sender:
    """Sends packed ``add`` commands of one queue object on a connection it keeps (plain Redis),
    or through the runner (cluster). Used by one thread at a time (the group commit's leader)."""

    def __init__(self, runner: ScriptRunner, queue: str, command: AddCommand) -> None:
        self._runner = runner
        self._queue = queue
        self._command = command
        client = runner.client
        self._pool = client.connection_pool if isinstance(client, Redis) else None
        self._conn: Any = None
        self._forked()
        _LIVE.add(self)

    def _forked(self) -> None:
        """Forget the kept connection: at creation, and in a forked child, whose socket is the
        parent's (the pool makes the child its own connections)."""
        self._conn = None
        # Held for each call and by close(): the kept connection goes back to the pool only
        # when no call uses it.
        self._using = threading.Lock()

    def send(self, capacity: int, triples: Sequence[Triple]) -> Answers:
        """One script call storing ``triples``; raises ``RedisUnavailableError`` on failure."""
        runner = self._runner
        if runner.closed:
            return FAILED
        if self._pool is None:
            return runner.run(  # type: ignore[no-any-return]
                self._queue,
                self._command.keys_for(capacity, triples),
                "add",
                *self._command.args(capacity, triples),
            )
        packed = self._command.pack(runner.now_arg(), capacity, triples)
        try:
            with self._using:
                result = self._call(packed)
        except FAILURES as exc:
            raise runner.health.failed(self._queue, "enqueue", exc) from exc
        runner.health.ok()
        return result  # type: ignore[no-any-return]

    def _call(self, packed: bytes) -> Any:
        conn = self._connection()
        try:
            return conn.retry.call_with_retry(
                lambda: self._round_trip(conn, packed), lambda _error: conn.disconnect()
            )
        except NoScriptError:
            # Redis restarted or flushed its scripts: load it again and resend once.
            self._runner.client.script_load(SCRIPT_TEXT)
            return self._round_trip(conn, packed)

    @staticmethod
    def _round_trip(conn: Any, packed: bytes) -> Any:
        conn.send_packed_command([packed], check_health=False)
        return conn.read_response()

    def _connection(self) -> Any:
        """The kept connection, taken from the pool on first use."""
        if self._conn is None:
            assert self._pool is not None
            self._conn = self._pool.get_connection()
        return self._conn

    def close(self) -> None:
        """Give the kept connection back to the pool (a later call takes one again)."""
        with self._using:
            conn, self._conn = self._conn, None
            if conn is not None and self._pool is not None:
                self._pool.release(conn)


# Every group commit and sender of the process, reset in a forked child.
_LIVE: weakref.WeakSet[GroupCommit | Sender] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for live in list(_LIVE):
        live._forked()


os.register_at_fork(after_in_child=_after_fork_in_child)
