"""REST API for operators: worker status and control, queue counts, dead letters and jobs by
id, health; as ASGI or WSGI.

One routing core (:class:`_Router`: method, path, query and ``Authorization`` header in, a
response or a call to make out; no I/O of its own) and two thin adapters around it,
:func:`asgi_app` and :func:`wsgi_app`. What it shows comes from the operator view of
:mod:`varmq.ops`, the same as the Prometheus collector and the ``varmq`` command. Standard
library only. Routes, JSON shapes and status codes follow upstream varmq's ``NewServerMux``; the
differences are listed in ``docs/operations.md``.

Control calls (pause, stop, restart, concurrency) may block (``restart`` waits for running
jobs), so they never run on a server's thread or an event loop's pool: :class:`_Controls` runs
each on a thread of its own, at most a few at once and one per worker, and the request waits
for it a bounded time. Reads (lists, counts, ``/health``) never wait on them.

Not a server: run the ASGI app under uvicorn/hypercorn or mount it in Starlette/FastAPI, and
the WSGI app under any WSGI server or mounted in Flask/Django.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import hmac
import json
import logging
import re
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, TypeVar
from urllib.parse import parse_qs

from ..api.records import Records
from ..model import validate
from ..model.errors import WorkerStateError
from .openapi import openapi
from .view import (
    WorkerSource,
    binds_queue,
    bound_dead_letters,
    bound_handle,
    bound_queues,
    find_workers,
    unreachable,
    worker_metrics,
    worker_summary,
)
from .worker_records import other_workers

__all__ = ["asgi_app", "wsgi_app"]

log = logging.getLogger("varmq.rest")

Headers = list[tuple[str, str]]

_ACTIONS = ("pause", "resume", "stop", "restart", "start")
_INTEGER = re.compile(r"-?[0-9]{1,10}")
_MAX_CONCURRENCY = 2**31 - 1
_MAX_DEAD_LIMIT = 10_000
_JSON = "application/json"


class _Response:
    """What a route answers: status, body (JSON or empty) and extra headers."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, payload: Any = None, headers: Headers | None = None) -> None:
        self.status = status
        self.headers: Headers = list(headers or [])
        if payload is None:
            self.body = b""
        else:
            # Data of in-memory dead letters may be any object: shown by its repr.
            self.body = (json.dumps(payload, default=repr) + "\n").encode()
            self.headers.append(("Content-Type", _JSON))
        self.headers.append(("Content-Length", str(len(self.body))))

    @property
    def status_line(self) -> str:
        return f"{self.status} {HTTPStatus(self.status).phrase}"


def _error(status: int, message: str, headers: Headers | None = None) -> _Response:
    return _Response(status, {"error": message}, headers)


def _digest(text: str) -> bytes:
    # Hashing first makes the comparison independent of the lengths as well.
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).digest()


R = TypeVar("R")


def _guarded(what: str, call: Callable[[], R]) -> R | _Response:
    """``call()``; an unexpected exception is a logged 500 whose body tells nothing."""
    try:
        return call()
    except Exception:
        log.exception("varmq.rest: %s failed", what)
        return _error(500, "internal error")


@dataclass(frozen=True)
class _Call:
    """Work a route needs done outside the routing: a read, or a control call on ``worker``."""

    what: str
    run: Callable[[], _Response]
    worker: str | None = None  # set for control calls


def _check_token(token: object, insecure: bool) -> bytes | None:
    """The digest of the token to require; ``None`` only with ``insecure=True``."""
    if token is None:
        if not insecure:
            raise ValueError(
                "varmq.rest: no token given; pass token=... to require 'Authorization: Bearer "
                "<token>', or insecure=True to serve without authentication"
            )
        log.warning(
            "varmq.rest: insecure=True: anyone who can reach this API can pause, stop and "
            "retune workers. Serve it on a private interface only."
        )
        return None
    if not isinstance(token, str):
        raise TypeError(f"varmq.rest: token must be a str, got {type(token).__name__}")
    if not token.strip():
        raise ValueError(
            "varmq.rest: the token is empty or blank (an unset environment variable?); "
            "refusing to serve without authentication: pass a real token, or insecure=True "
            "without one"
        )
    if insecure:
        raise ValueError("varmq.rest: insecure=True and a token: give one or the other")
    return _digest(token.strip())


class _Router:
    """The routes, independent of the server interface. Thread-safe: it keeps no state."""

    def __init__(self, prefix: str, token: object, workers: WorkerSource, insecure: bool) -> None:
        prefix = prefix.rstrip("/")
        if prefix and not prefix.startswith("/"):
            prefix = "/" + prefix
        self.prefix = prefix
        self._token = _check_token(token, insecure)
        self._workers = workers

    # -- entry point ------------------------------------------------------------------------

    def resolve(
        self, method: str, path: str, query: str, authorization: str | None
    ) -> _Response | _Call:
        """A response at once, or the call to make for it; never raises, does no I/O."""
        method = method.upper()
        return _guarded(f"{method} {path}", lambda: self._route(method, path, query, authorization))

    def _route(
        self, method: str, path: str, query: str, authorization: str | None
    ) -> _Response | _Call:
        if self.prefix:
            if path != self.prefix and not path.startswith(self.prefix + "/"):
                return _error(404, "not found")
            path = path[len(self.prefix) :]
        parts = [p for p in path.split("/") if p]
        if parts == ["health"]:
            # Open even with a token, for load balancers: it names queues, never errors.
            return self._only(method, "GET") or _Call("GET /health", self._health)
        if not self._authorized(authorization):
            return _error(401, "missing or wrong bearer token", [("WWW-Authenticate", "Bearer")])
        if parts == ["openapi.json"]:
            return self._only(method, "GET") or _Response(200, openapi(self.prefix))
        if parts and parts[0] == "workers":
            return self._workers_route(method, parts[1:])
        if parts and parts[0] == "queues":
            return self._queues_route(method, parts[1:], query)
        return _error(404, "not found")

    def _authorized(self, authorization: str | None) -> bool:
        if self._token is None:
            return True
        scheme, _, credentials = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(_digest(credentials.strip()), self._token)

    @staticmethod
    def _only(method: str, allowed: str) -> _Response | None:
        if method == allowed:
            return None
        return _error(405, "method not allowed", [("Allow", allowed)])

    # -- health -----------------------------------------------------------------------------

    def _health(self) -> _Response:
        down = unreachable(bound_queues(find_workers(self._workers)))
        if not down:
            return _Response(200, {"status": "ok"})
        names = [{"name": row["name"], "storage": row.get("storage")} for row in down]
        return _Response(503, {"status": "unavailable", "unreachable": names})

    # -- workers ----------------------------------------------------------------------------

    def _workers_route(self, method: str, rest: list[str]) -> _Response | _Call:
        if not rest:
            return self._only(method, "GET") or _Call("GET /workers", self._list_workers)
        name, rest = rest[0], rest[1:]
        if not rest:
            return self._only(method, "GET") or _Call(
                f"GET /workers/{name}", lambda: self._worker(name)
            )
        if len(rest) == 2 and rest[0] == "actions":
            return self._only(method, "PATCH") or self._act(name, rest[1])
        if len(rest) == 3 and rest[:2] == ["config", "concurrency"]:
            return self._only(method, "PATCH") or self._tune(name, rest[2])
        return _error(404, "not found")

    def _list_workers(self) -> _Response:
        workers = find_workers(self._workers)
        served = [worker_summary(n, w) for n, w in workers.items()]
        return _Response(200, served + other_workers(workers))

    def _worker(self, name: str) -> _Response:
        worker = find_workers(self._workers).get(name)
        if worker is None:
            return _error(404, "worker not found")
        return _Response(200, {**worker_summary(name, worker), "metrics": worker_metrics(worker)})

    def _act(self, name: str, action: str) -> _Response | _Call:
        worker = find_workers(self._workers).get(name)
        if worker is None:
            return _error(404, "worker not found")
        if action not in _ACTIONS:
            return _error(400, f"unknown action {action!r}; expected one of {', '.join(_ACTIONS)}")
        call: Callable[[], None] = getattr(worker, action)
        return _Call(f"{action} of worker {name!r}", lambda: _control(call), worker=name)

    def _tune(self, name: str, value: str) -> _Response | _Call:
        worker = find_workers(self._workers).get(name)
        if worker is None:
            return _error(404, "worker not found")
        if not _INTEGER.fullmatch(value) or abs(int(value)) > _MAX_CONCURRENCY:
            return _error(400, f"invalid concurrency value {value!r}; expected an integer")
        n = max(int(value), 0)  # n <= 0: the CPU count, as documented
        return _Call(
            f"concurrency change of worker {name!r}",
            lambda: _control(lambda: worker.tune_pool(n)),
            worker=name,
        )

    # -- queues -----------------------------------------------------------------------------

    def _queues_route(self, method: str, rest: list[str], query: str) -> _Response | _Call:
        if len(rest) >= 3 and rest[-2] == "jobs":
            return self._jobs_route(method, "/".join(rest[:-2]), rest[-1])
        refused = self._only(method, "GET")
        if refused:
            return refused
        if not rest:
            return _Call("GET /queues", lambda: _Response(200, self._queues()))
        if len(rest) >= 2 and rest[-1] == "dead":
            name = "/".join(rest[:-1])
            limit = _limit(query)
            if isinstance(limit, _Response):
                return limit
            return _Call(f"GET /queues/{name}/dead", lambda: self._dead(name, limit))
        name = "/".join(rest)
        return _Call(f"GET /queues/{name}", lambda: self._queue(name))

    def _queues(self) -> list[dict[str, Any]]:
        return bound_queues(find_workers(self._workers))

    def _queue(self, name: str) -> _Response:
        for row in self._queues():
            if row["name"] == name:
                return _Response(200, row)
        return _error(404, "queue not found")

    # -- jobs by id --------------------------------------------------------------------------

    def _jobs_route(self, method: str, name: str, job_id: str) -> _Response | _Call:
        where = f"/queues/{name}/jobs/{job_id}"
        if method == "GET":
            return _Call(f"GET {where}", lambda: self._job(name, job_id))
        if method == "DELETE":
            return _Call(f"DELETE {where}", lambda: self._cancel(name, job_id))
        return _error(405, "method not allowed", [("Allow", "GET, DELETE")])

    def _records(self, name: str) -> tuple[Any, Records] | _Response:
        workers = find_workers(self._workers)
        handle = bound_handle(workers, name)
        if handle is None:
            if binds_queue(workers, name):  # a topic subscription: no handle, no records
                return _error(400, f"varmq: queue {name!r} keeps no job records")
            return _error(404, "queue not found")
        try:
            return handle, handle._job_records()
        except (TypeError, ValueError) as exc:
            return _error(400, str(exc))

    def _job(self, name: str, job_id: str) -> _Response:
        found = self._records(name)
        if isinstance(found, _Response):
            return found
        _, records = found
        try:
            record = records.read(job_id)
        except Exception as exc:  # the storage did not answer
            return _unreachable(name, exc)
        if record is None:
            return _error(404, "job not found")
        return _Response(200, dataclasses.asdict(record))

    def _cancel(self, name: str, job_id: str) -> _Response:
        found = self._records(name)
        if isinstance(found, _Response):
            return found
        handle, records = found
        try:
            if handle.cancel(job_id):  # also stops it at once if it runs in this process
                return _Response(200, {"cancelled": True})
            record = records.read(job_id)
        except Exception as exc:
            return _unreachable(name, exc)
        if record is None:
            return _error(404, "job not found")
        return _error(409, f"job {job_id!r} already ended ({record.state})")

    def _dead(self, name: str, limit: int) -> _Response:
        try:
            rows = bound_dead_letters(find_workers(self._workers), name, limit)
        except Exception as exc:  # the storage did not answer
            return _unreachable(name, exc)
        if rows is None:
            return _error(404, "queue not found")
        return _Response(200, rows)


def _unreachable(name: str, exc: Exception) -> _Response:
    return _error(503, f"queue {name!r} is unreachable: {type(exc).__name__}: {exc}")


def _limit(query: str) -> int | _Response:
    values = parse_qs(query, keep_blank_values=True).get("limit")
    if not values:
        return 100
    text = values[-1]
    if not re.fullmatch(r"[0-9]{1,6}", text) or not 1 <= int(text) <= _MAX_DEAD_LIMIT:
        return _error(400, f"invalid limit {text!r}; expected an integer from 1 to 10000")
    return int(text)


def _control(call: Callable[[], None]) -> _Response:
    try:
        call()
    except WorkerStateError as exc:
        return _error(409, str(exc))
    except (TypeError, ValueError) as exc:  # refused by the worker's own checks
        return _error(400, str(exc))
    return _Response(200)


class _Controls:
    """Control calls, each on a thread of its own: at most ``limit`` at once and one per worker.

    A request waits ``timeout`` seconds for its call; one that takes longer goes on in the
    background and the request is answered 503. While a call on a worker runs, another on the
    same worker is answered 409, and beyond ``limit`` calls in progress, 503: a worker whose
    jobs hang cannot pile up threads. The threads are daemon threads: a call that hangs (a
    restart waiting for a job that never ends) cannot be stopped and must not keep the process
    alive.
    """

    def __init__(self, limit: int, timeout: float) -> None:
        self.limit = limit
        self.timeout = timeout
        # Guards _busy: worker name -> what runs on it now; at most `limit` entries.
        self._lock = threading.Lock()
        self._busy: dict[str, str] = {}

    def start(self, call: _Call, done: Callable[[_Response], None]) -> _Response | None:
        """Run ``call`` and give its response to ``done`` (on the call's thread); or the
        refusal, at once, when the worker or the pool is busy."""
        name = call.worker or ""
        with self._lock:
            running = self._busy.get(name)
            if running is not None:
                return _error(409, f"worker {name!r} is still busy with a {running}; try later")
            if len(self._busy) >= self.limit:
                return _error(
                    503, f"{self.limit} control calls are still running; try later", _RETRY
                )
            self._busy[name] = call.what.partition(" of ")[0]

        def body() -> None:
            try:
                response = _guarded(call.what, call.run)
            finally:
                with self._lock:
                    del self._busy[name]
            done(response)

        threading.Thread(target=body, name=f"varmq:rest:control:{name}", daemon=True).start()
        return None

    def late(self, call: _Call) -> _Response:
        """The answer to a request whose call did not end in time."""
        return _error(
            503,
            f"the {call.what} did not finish within {self.timeout:g} s; it goes on",
            _RETRY,
        )

    def run(self, call: _Call) -> _Response:
        """Run ``call`` and wait for it, at most ``timeout`` seconds (for a server's thread)."""
        answered = threading.Event()
        box: list[_Response] = []

        def done(response: _Response) -> None:
            box.append(response)
            answered.set()

        refused = self.start(call, done)
        if refused is not None:
            return refused
        return box[0] if answered.wait(self.timeout) else self.late(call)

    async def run_async(self, call: _Call) -> _Response:
        """:meth:`run` for an event loop: the loop never blocks."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_Response] = loop.create_future()

        def settle(response: _Response) -> None:
            if not future.done():
                future.set_result(response)

        def done(response: _Response) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(settle, response)

        refused = self.start(call, done)
        if refused is not None:
            return refused
        try:
            return await asyncio.wait_for(asyncio.shield(future), self.timeout)
        except asyncio.TimeoutError:
            return self.late(call)


_RETRY: Headers = [("Retry-After", "5")]


def _controls(control_timeout: float, control_threads: int) -> _Controls:
    timeout = validate.seconds("control_timeout", control_timeout, positive=True)
    if isinstance(control_threads, bool) or not isinstance(control_threads, int):
        raise TypeError(f"varmq.rest: control_threads must be an int, got {control_threads!r}")
    if control_threads < 1:
        raise ValueError(f"varmq.rest: control_threads must be >= 1, got {control_threads}")
    return _Controls(control_threads, timeout)


# -- ASGI -------------------------------------------------------------------------------------

Scope = Mapping[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def asgi_app(
    prefix: str = "",
    token: str | None = None,
    workers: WorkerSource = None,
    *,
    insecure: bool = False,
    control_timeout: float = 10.0,
    control_threads: int = 4,
) -> ASGIApp:
    """The REST API as an ASGI 3 application.

    ``prefix`` (e.g. ``"/varmq"``) is stripped from paths, after any ``root_path`` the server
    or a mounting framework set. ``token``: every route but ``/health`` requires
    ``Authorization: Bearer <token>``; an empty or blank token raises ``ValueError``, and so
    does no token at all unless ``insecure=True`` says to serve without authentication.
    ``workers``: a mapping of name to worker, or an iterable of workers; default: every named
    worker (:func:`varmq.workers`), looked up on each request. Control calls run on threads of
    their own, at most ``control_threads`` at once and one per worker, each awaited at most
    ``control_timeout`` seconds (then 503; the call goes on); reads run in a thread, never on
    the event loop, and never wait on control calls.
    """
    router = _Router(prefix, token, workers, insecure)
    controls = _controls(control_timeout, control_threads)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await _lifespan(receive, send)
            return
        if kind != "http":
            return  # websockets: not ours; closing without accepting refuses them
        path = scope.get("path", "/")
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        authorization = None
        for key, value in scope.get("headers", []):
            if key.lower() == b"authorization":
                authorization = value.decode("latin-1")
        query = bytes(scope.get("query_string", b"")).decode("latin-1")
        work = router.resolve(scope["method"], path, query, authorization)
        if isinstance(work, _Call):
            if work.worker is not None:
                work = await controls.run_async(work)
            else:
                work = await asyncio.to_thread(_guarded, work.what, work.run)
        await send(
            {
                "type": "http.response.start",
                "status": work.status,
                "headers": [(k.lower().encode(), v.encode()) for k, v in work.headers],
            }
        )
        await send({"type": "http.response.body", "body": work.body})

    return app


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


# -- WSGI -------------------------------------------------------------------------------------

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def wsgi_app(
    prefix: str = "",
    token: str | None = None,
    workers: WorkerSource = None,
    *,
    insecure: bool = False,
    control_timeout: float = 10.0,
    control_threads: int = 4,
) -> WSGIApp:
    """The REST API as a WSGI application (PEP 3333); arguments as for :func:`asgi_app`.

    Paths are read from ``PATH_INFO``, so a mount point in ``SCRIPT_NAME`` (Flask's or
    werkzeug's ``DispatcherMiddleware``, Django) is already removed; ``prefix`` is stripped
    after that. Reads run on the server's thread; control calls as for :func:`asgi_app`, so a
    hanging one holds a server thread ``control_timeout`` seconds at most.
    """
    router = _Router(prefix, token, workers, insecure)
    controls = _controls(control_timeout, control_threads)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        # PEP 3333: PATH_INFO holds the raw bytes decoded as latin-1; names are UTF-8.
        raw = environ.get("PATH_INFO", "") or "/"
        try:
            path = raw.encode("latin-1").decode("utf-8")
        except (UnicodeEncodeError, UnicodeDecodeError):
            path = raw
        method = environ.get("REQUEST_METHOD", "GET")
        query = environ.get("QUERY_STRING", "")
        work = router.resolve(method, path, query, environ.get("HTTP_AUTHORIZATION"))
        if isinstance(work, _Call):
            work = controls.run(work) if work.worker is not None else _guarded(work.what, work.run)
        start_response(work.status_line, work.headers)
        return [work.body]

    return app
