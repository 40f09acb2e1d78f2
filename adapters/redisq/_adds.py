"""Producers' adds: the one call of ``queue.lua``'s ``add`` that concurrent adds share.

The adds of one queue object are group-committed (:class:`varmq.contract.batching.GroupCommit`,
up to :data:`MAX_BATCH` adds a call and :data:`ROUNDS` calls a leader): one add alone is
written at once; adds that arrive while a call is in flight go together in the next one. Each
caller learns exactly what happened to its own job: stored, already stored (dedup), refused,
or the exception of its batch's call (a batch is one atomic script call: it was stored as a
whole or not at all).

The command is packed here, once per batch, from parts encoded once per queue object, and sent
on a connection this queue object keeps (plain Redis): no per-call command parsing, pool
checkout or reply callbacks. Cluster clients go through :class:`~redisq._script.ScriptRunner`.
The async transport (:mod:`redisq._aio`) sends the same packed command.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any, Final

from redis import Redis
from redis.exceptions import NoScriptError

from ._script import FAILED, SCRIPT_SHA, SCRIPT_TEXT, Failed, ScriptRunner
from .errors import FAILURES

__all__ = ["MAX_BATCH", "ROUNDS", "AddCommand", "Sender", "Triple", "bulk"]

# The keys of a plain add, by their index in the queue's keys (KEYS order of queue.lua): meta,
# ready, payloads, priorities, seq.
_PLAIN_KEYS: Final = (0, 1, 2, 3, 9)
# Adds per script call: one call blocks Redis while it runs, like enqueue_many's chunks.
MAX_BATCH: Final = 1000
# Calls a leader sends before it hands the lead on: each call it keeps saves a thread wake-up,
# each one delays its own caller by a round trip.
ROUNDS: Final = 4

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


# Every sender of the process, reset in a forked child.
_LIVE: weakref.WeakSet[Sender] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for live in list(_LIVE):
        live._forked()


os.register_at_fork(after_in_child=_after_fork_in_child)
