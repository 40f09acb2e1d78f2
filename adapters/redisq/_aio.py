"""The async transport of producers' adds: ``redis.asyncio`` on the caller's event loop.

Same protocol as the blocking adds (:mod:`redisq._adds`): the same ``add`` entry of
``queue.lua``, sent as the same packed ``EVALSHA``. Each event loop gets its own writer, with
its own ``redis.asyncio`` connection (a connection belongs to one loop). Group commit, async
flavour: the adds that arrive while a call is in flight are sent together by the next call, so
a hundred coroutines adding at once cost a few round trips, and one coroutine alone is written
at once. The write runs in a task of its own, so a caller that is cancelled never leaves the
connection half way through a reply, and every other caller still gets its own answer.

Where no ``redis.asyncio`` connection can be made like the blocking client's (Redis Cluster, a
client class redisq does not know, e.g. fakeredis), each batch is sent by the blocking transport
on one of two threads of redisq's own (``redisq:producer``) instead: the adds of a loop are
still gathered into one call.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import redis.asyncio.connection as async_connection
from redis import Redis
from redis import connection as sync_connection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ._adds import MAX_BATCH, AddCommand, Triple, bulk
from ._script import FAILED, SCRIPT_TEXT, ScriptRunner
from .errors import FAILURES

__all__ = ["AsyncAdds", "async_connection_factory", "threads"]

# The blocking connection classes and their redis.asyncio twins.
_TWINS: Final[dict[type[Any], type[Any]]] = {
    sync_connection.Connection: async_connection.Connection,
    sync_connection.SSLConnection: async_connection.SSLConnection,
    sync_connection.UnixDomainSocketConnection: async_connection.UnixDomainSocketConnection,
}
# Connection settings carried over from the blocking client (the rest, such as its retry
# object, are blocking-only).
_CARRIED: Final = (
    "host",
    "port",
    "path",
    "db",
    "username",
    "password",
    "socket_timeout",
    "socket_connect_timeout",
    "socket_keepalive",
    "client_name",
    "ssl_keyfile",
    "ssl_certfile",
    "ssl_cert_reqs",
    "ssl_ca_certs",
    "ssl_ca_data",
    "ssl_check_hostname",
)
# Connection failures a write is retried after, once, on a new connection (like the blocking
# client's one retry): a pooled connection that died with a Redis restart.
_RETRIED: Final = (RedisConnectionError, RedisTimeoutError, OSError)

ConnectionFactory = Callable[[], Any]

# Threads for the adds that cannot go through redis.asyncio: redisq's own, never the
# application's default executor. Two suffice: the blocking group commit batches what they bring.
_THREADS: Final = 2
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()  # guards _pool's creation


def threads() -> ThreadPoolExecutor:
    """redisq's producer threads, started on first use and kept for the process."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_THREADS, thread_name_prefix="redisq:producer")
        return _pool


def async_connection_factory(runner: ScriptRunner) -> ConnectionFactory | None:
    """How to open a ``redis.asyncio`` connection like the runner's blocking client's, or
    ``None`` when there is no such twin (Redis Cluster, an unknown connection class)."""
    client = runner.client
    if not isinstance(client, Redis):
        return None
    pool = client.connection_pool
    twin = _TWINS.get(pool.connection_class)
    if twin is None:
        return None
    kwargs = {key: pool.connection_kwargs[key] for key in _CARRIED if key in pool.connection_kwargs}
    return lambda: twin(**kwargs)


class _LoopWriter:
    """The adds of one queue object on one event loop: waiting adds and the one writer task."""

    def __init__(self, connect: ConnectionFactory | None) -> None:
        self.connect = connect
        self.conn: Any = None
        self.waiting: list[tuple[Triple, asyncio.Future[int]]] = []
        self.writer: asyncio.Task[None] | None = None


class AsyncAdds:
    """``add`` for coroutines, for one queue object."""

    def __init__(
        self,
        runner: ScriptRunner,
        queue: str,
        command: AddCommand,
        capacity: Callable[[], int],
        answer: Callable[[Any, int], list[int]],
        send_blocking: Callable[[list[Triple]], list[int]],
    ) -> None:
        self._runner = runner
        self._queue = queue
        self._command = command
        self._capacity = capacity
        self._answer = answer  # the reply of one call -> one code per add (as the sync path)
        # One batch through the blocking transport (Sender), answer codes: where no
        # redis.asyncio twin exists.
        self._send_blocking = send_blocking
        self._connect = async_connection_factory(runner)
        self._writers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopWriter] = (
            weakref.WeakKeyDictionary()
        )

    async def add(self, triple: Triple) -> int:
        """Store ``triple`` with the adds in flight on this loop; its own answer code."""
        loop = asyncio.get_running_loop()
        state = self._writers.get(loop)
        if state is None:
            state = self._writers[loop] = _LoopWriter(self._connect)
        future: asyncio.Future[int] = loop.create_future()
        state.waiting.append((triple, future))
        if state.writer is None:
            state.writer = loop.create_task(self._write(state))
        return await future

    async def _write(self, state: _LoopWriter) -> None:
        """Send what waits, batch after batch, until nothing does."""
        try:
            while state.waiting:
                batch = state.waiting[:MAX_BATCH]
                del state.waiting[:MAX_BATCH]
                try:
                    answers = await self._send(state, [triple for triple, _ in batch])
                except BaseException as exc:  # every caller of the batch is told
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
                        raise
                    continue
                for (_, future), answer in zip(batch, answers, strict=True):
                    if not future.done():  # its caller may have been cancelled meanwhile
                        future.set_result(answer)
        finally:
            state.writer = None
            # Left only when this task itself was cancelled (its loop is shutting down).
            left, state.waiting = state.waiting, []
            for _, future in left:
                future.cancel()

    async def _send(self, state: _LoopWriter, triples: Sequence[Triple]) -> list[int]:
        runner = self._runner
        if runner.closed:
            return self._answer(FAILED, len(triples))
        if self._connect is None:
            # No redis.asyncio twin: the whole batch in one blocking call on redisq's threads.
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(threads(), self._send_blocking, list(triples))
        packed = self._command.pack(runner.now_arg(), self._capacity(), triples)
        try:
            reply = await self._call(state, packed)
        except FAILURES as exc:
            raise runner.health.failed(self._queue, "enqueue", exc) from exc
        runner.health.ok()
        answers = self._answer(reply, len(triples))
        if len(answers) != len(triples):  # told to every caller rather than guessed
            raise RuntimeError(f"redisq: {len(answers)} answers for {len(triples)} adds")
        return answers

    async def _call(self, state: _LoopWriter, packed: bytes) -> Any:
        connect = state.connect
        assert connect is not None  # _send goes through a thread when there is no twin
        for attempt in (1, 2):
            if state.conn is None:
                state.conn = connect()
            conn = state.conn
            try:
                await conn.send_packed_command([packed], check_health=False)
                return await conn.read_response()
            except NoScriptError:
                load = [b"*3\r\n", bulk(b"SCRIPT"), bulk(b"LOAD"), bulk(SCRIPT_TEXT.encode())]
                await conn.send_packed_command(load, check_health=False)
                await conn.read_response()
                await conn.send_packed_command([packed], check_health=False)
                return await conn.read_response()
            except _RETRIED:
                state.conn = None
                await conn.disconnect()
                if attempt == 2:
                    raise
            except BaseException:
                # Cancelled or failed half way: the connection may hold an unread reply.
                state.conn = None
                await conn.disconnect()
                raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Close this object's connections, each on its own loop (from any thread)."""
        writers = list(self._writers.items())
        self._writers.clear()
        for loop, state in writers:
            conn, state.conn = state.conn, None
            if conn is not None and not loop.is_closed():
                asyncio.run_coroutine_threadsafe(conn.disconnect(), loop)
