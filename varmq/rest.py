"""REST API for operators: worker status and control, queue counts; as ASGI or WSGI.

One routing core (:class:`_Router`: method, path and ``Authorization`` header in, status, JSON
body and headers out; no I/O) and two thin adapters around it, :func:`asgi_app` and
:func:`wsgi_app`. Standard library only: ASGI is a callable protocol and WSGI a callable, so
neither needs a framework. Routes, JSON shapes and status codes follow upstream varmq's
``NewServerMux``; the differences (409 for every state conflict, JSON error bodies, bearer
tokens, queue routes) are listed in ``docs/operations.md``.

Not a server: run the ASGI app under uvicorn/hypercorn or mount it in Starlette/FastAPI, and
the WSGI app under any WSGI server or mounted in Flask/Django.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from http import HTTPStatus
from typing import Any

from .errors import (
    NotRunningWorkerError,
    RunningWorkerError,
    SameConcurrencyError,
    WorkerPausedError,
    WorkerPausingError,
    WorkerStoppedError,
    WorkerStoppingError,
)
from .registry import workers as registered_workers
from .worker import BaseWorker

__all__ = ["asgi_app", "wsgi_app"]

log = logging.getLogger("varmq.rest")

Workers = Mapping[str, Any] | Iterable[Any] | None
Headers = list[tuple[str, str]]

_ACTIONS = ("pause", "resume", "stop", "restart", "start")
# Every state error a control call can raise; each answers 409 Conflict.
_STATE_ERRORS = (
    NotRunningWorkerError,
    RunningWorkerError,
    SameConcurrencyError,
    WorkerPausedError,
    WorkerPausingError,
    WorkerStoppedError,
    WorkerStoppingError,
)
_INTEGER = re.compile(r"-?[0-9]{1,10}")
_MAX_CONCURRENCY = 2**31 - 1
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
            self.body = (json.dumps(payload) + "\n").encode()
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


class _Router:
    """The routes, independent of the server interface. Thread-safe: it keeps no state."""

    def __init__(self, prefix: str, token: str | None, workers: Workers) -> None:
        prefix = prefix.rstrip("/")
        if prefix and not prefix.startswith("/"):
            prefix = "/" + prefix
        self.prefix = prefix
        self._token = _digest(token) if token else None
        self._workers = workers
        if token is None or token == "":
            log.warning(
                "varmq.rest: no token configured; anyone who can reach this API can pause, "
                "stop and retune workers. Pass token=... or serve it on a private interface."
            )

    # -- entry point ------------------------------------------------------------------------

    def handle(self, method: str, path: str, authorization: str | None) -> _Response:
        """Answer one request; never raises (an unexpected error is a logged 500)."""
        try:
            return self._route(method.upper(), path, authorization)
        except Exception:
            log.exception("varmq.rest: %s %s failed", method, path)
            return _error(500, "internal error")

    def _route(self, method: str, path: str, authorization: str | None) -> _Response:
        if self.prefix:
            if path != self.prefix and not path.startswith(self.prefix + "/"):
                return _error(404, "not found")
            path = path[len(self.prefix) :]
        parts = [p for p in path.split("/") if p]
        if parts == ["health"]:
            # Open even with a token: it tells nothing, and load balancers probe it.
            return self._only(method, "GET") or _Response(200, {"status": "ok"})
        if not self._authorized(authorization):
            return _error(401, "missing or wrong bearer token", [("WWW-Authenticate", "Bearer")])
        if parts and parts[0] == "workers":
            return self._workers_route(method, parts[1:])
        if parts and parts[0] == "queues":
            return self._queues_route(method, parts[1:])
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

    # -- workers ----------------------------------------------------------------------------

    def _all_workers(self) -> dict[str, BaseWorker[Any, Any, Any]]:
        source = registered_workers() if self._workers is None else self._workers
        if isinstance(source, Mapping):
            pairs = list(source.items())
        else:
            pairs = [(getattr(w, "name", "") or f"worker@{id(w):x}", w) for w in source]
        return {name: w for name, w in pairs if isinstance(w, BaseWorker)}

    def _workers_route(self, method: str, rest: list[str]) -> _Response:
        if not rest:
            return self._only(method, "GET") or _Response(
                200, [_summary(n, w) for n, w in self._all_workers().items()]
            )
        name, rest = rest[0], rest[1:]
        if not rest:
            refused = self._only(method, "GET")
            if refused:
                return refused
            worker = self._all_workers().get(name)
            if worker is None:
                return _error(404, "worker not found")
            m = worker.metrics
            metrics = {
                "submitted": m.submitted,
                "completed": m.completed,
                "successful": m.successful,
                "failed": m.failed,
            }
            return _Response(200, {**_summary(name, worker), "metrics": metrics})
        if len(rest) == 2 and rest[0] == "actions":
            return self._only(method, "PATCH") or self._act(name, rest[1])
        if len(rest) == 3 and rest[:2] == ["config", "concurrency"]:
            return self._only(method, "PATCH") or self._tune(name, rest[2])
        return _error(404, "not found")

    def _act(self, name: str, action: str) -> _Response:
        worker = self._all_workers().get(name)
        if worker is None:
            return _error(404, "worker not found")
        if action not in _ACTIONS:
            return _error(400, f"unknown action {action!r}; expected one of {', '.join(_ACTIONS)}")
        call: Callable[[], None] = getattr(worker, action)
        return _control(call)

    def _tune(self, name: str, value: str) -> _Response:
        worker = self._all_workers().get(name)
        if worker is None:
            return _error(404, "worker not found")
        if not _INTEGER.fullmatch(value) or abs(int(value)) > _MAX_CONCURRENCY:
            return _error(400, f"invalid concurrency value {value!r}; expected an integer")
        n = int(value)
        return _control(lambda: worker.tune_pool(n))

    # -- queues -----------------------------------------------------------------------------

    def _queues_route(self, method: str, rest: list[str]) -> _Response:
        refused = self._only(method, "GET")
        if refused:
            return refused
        queues = self._all_queues()
        if not rest:
            return _Response(200, list(queues.values()))
        name = "/".join(rest)
        for key, entry in queues.items():
            if key[0] == name:
                return _Response(200, entry)
        return _error(404, "queue not found")

    def _all_queues(self) -> dict[tuple[str, ...], dict[str, Any]]:
        """Every queue bound workers know; a storage queue bound by several workers once."""
        queues: dict[tuple[str, ...], dict[str, Any]] = {}
        for worker_name, worker in self._all_workers().items():
            for stats in _queue_stats(worker):
                where = str(stats.get("storage", ""))
                # In-memory queues belong to their worker, whatever their names.
                key = (stats["name"], where, worker_name if where == "memory" else "")
                entry = queues.setdefault(key, {**stats, "workers": []})
                entry["workers"].append(worker_name)
        return queues


def _summary(name: str, worker: BaseWorker[Any, Any, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "status": worker.status.value,
        "concurrency": worker.num_concurrency,
        "num_processing": worker.num_processing,
        "num_pending": worker.num_pending,
        "num_idle_workers": worker.num_idle_workers,
    }


def _queue_stats(worker: BaseWorker[Any, Any, Any]) -> list[dict[str, Any]]:
    """The worker's ``queue_stats()``; a worker without it counts as one queue of its own."""
    queue_stats = getattr(worker, "queue_stats", None)
    if callable(queue_stats):
        return [dict(s) for s in queue_stats()]
    return [
        {
            "name": worker.name or f"worker@{id(worker):x}",
            "kind": "worker",
            "waiting": worker.num_pending,
            "in_flight": worker.num_processing,
            "delayed": 0,
            "dead": 0,
            "oldest_age": 0.0,
        }
    ]


def _control(call: Callable[[], None]) -> _Response:
    try:
        call()
    except _STATE_ERRORS as exc:
        return _error(409, str(exc))
    return _Response(200)


# -- ASGI -------------------------------------------------------------------------------------

Scope = Mapping[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def asgi_app(prefix: str = "", token: str | None = None, workers: Workers = None) -> ASGIApp:
    """The REST API as an ASGI 3 application.

    ``prefix`` (e.g. ``"/varmq"``) is stripped from paths, after any ``root_path`` the server
    or a mounting framework set. ``token``: require ``Authorization: Bearer <token>`` on every
    route but ``/health`` (without one, a warning is logged now). ``workers``: a mapping of
    name to worker, or an iterable of workers; default: every named worker
    (:func:`varmq.workers`), looked up on each request. Worker calls (``restart`` waits for
    running jobs) and storage queries run in a thread, never on the event loop.
    """
    router = _Router(prefix, token, workers)

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
        response = await asyncio.to_thread(router.handle, scope["method"], path, authorization)
        await send(
            {
                "type": "http.response.start",
                "status": response.status,
                "headers": [(k.lower().encode(), v.encode()) for k, v in response.headers],
            }
        )
        await send({"type": "http.response.body", "body": response.body})

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


def wsgi_app(prefix: str = "", token: str | None = None, workers: Workers = None) -> WSGIApp:
    """The REST API as a WSGI application (PEP 3333); arguments as for :func:`asgi_app`.

    Paths are read from ``PATH_INFO``, so a mount point in ``SCRIPT_NAME`` (Flask's or
    werkzeug's ``DispatcherMiddleware``, Django) is already removed; ``prefix`` is stripped
    after that.
    """
    router = _Router(prefix, token, workers)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        # PEP 3333: PATH_INFO holds the raw bytes decoded as latin-1; names are UTF-8.
        raw = environ.get("PATH_INFO", "") or "/"
        try:
            path = raw.encode("latin-1").decode("utf-8")
        except (UnicodeEncodeError, UnicodeDecodeError):
            path = raw
        method = environ.get("REQUEST_METHOD", "GET")
        response = router.handle(method, path, environ.get("HTTP_AUTHORIZATION"))
        start_response(response.status_line, response.headers)
        return [response.body]

    return app
