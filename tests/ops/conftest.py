"""Fixtures for the operations tests: real HTTP servers in threads, a client, Redis.

``serve_asgi`` runs an ASGI app under uvicorn on a loopback socket bound before the server
starts (no port race); ``serve_wsgi`` runs a WSGI app under ``wsgiref.simple_server``. Both stop
when the test ends. ``http`` is a small urllib client that returns status, headers and body for
every status code. The session's Redis database (``redis_db``) comes from ``tests/conftest.py``.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
import uvicorn


class Reply:
    """One HTTP response: status, headers (lower-case names) and body."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)


def http(method: str, url: str, token: str | None = None, header: str | None = None) -> Reply:
    """Send one request; 4xx and 5xx answers are returned, not raised."""
    request = urllib.request.Request(url, method=method)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    if header is not None:
        request.add_header("Authorization", header)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return Reply(
                response.status,
                {k.lower(): v for k, v in response.headers.items()},
                response.read(),
            )
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read())


@pytest.fixture
def workers() -> Iterator[list[Any]]:
    """Workers a test makes (it appends them); stopped when it ends."""
    made: list[Any] = []
    yield made
    for worker in made:
        worker.stop()
        worker.wait_until_stopped(10)


class _ReadyServer(uvicorn.Server):
    """A uvicorn server that sets an event once it listens."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()


@pytest.fixture
def serve_asgi() -> Iterator[Callable[[Any], str]]:
    """``serve_asgi(app)`` starts uvicorn with ``app`` and returns its base URL."""
    started: list[tuple[_ReadyServer, threading.Thread]] = []

    def serve(app: Any) -> str:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", lifespan="on")
        server = _ReadyServer(config)
        thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="test:uvicorn", daemon=True
        )
        thread.start()
        started.append((server, thread))
        assert server.ready.wait(10), "uvicorn did not start"
        return f"http://127.0.0.1:{port}"

    yield serve
    for server, thread in started:
        server.should_exit = True
        thread.join(10)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def serve_wsgi() -> Iterator[Callable[[Any], str]]:
    """``serve_wsgi(app)`` starts a wsgiref server with ``app`` and returns its base URL."""
    started: list[tuple[Any, threading.Thread]] = []

    def serve(app: Any) -> str:
        server = make_server("127.0.0.1", 0, app, handler_class=_QuietHandler)
        thread = threading.Thread(
            target=server.serve_forever, args=(0.05,), name="test:wsgiref", daemon=True
        )
        thread.start()
        started.append((server, thread))
        return f"http://127.0.0.1:{server.server_port}"

    yield serve
    for server, thread in started:
        server.shutdown()
        server.server_close()
        thread.join(10)
