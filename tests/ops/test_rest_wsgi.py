"""The REST API as a WSGI app, under ``wsgiref.simple_server``, over HTTP."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from conftest import http
from rest_contract import RestContract

import varmq
from varmq.rest import wsgi_app


class TestWsgiApp(RestContract):
    factory = staticmethod(wsgi_app)

    @pytest.fixture
    def serve(self, serve_wsgi: Callable[[Any], str]) -> Callable[[Any], str]:
        return serve_wsgi


def _mount(prefix: str, app: Any) -> Any:
    """What Flask's DispatcherMiddleware or Django do: move the mount point to SCRIPT_NAME."""

    def dispatch(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if not path.startswith(prefix):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"outside the mount"]
        environ["SCRIPT_NAME"] = environ.get("SCRIPT_NAME", "") + prefix
        environ["PATH_INFO"] = path[len(prefix) :]
        return app(environ, start_response)

    return dispatch


def test_app_mounted_under_script_name_routes_on_path_info(
    serve_wsgi: Callable[[Any], str],
) -> None:
    base = serve_wsgi(_mount("/ops", wsgi_app(workers={}, insecure=True)))
    assert http("GET", base + "/ops/health").json() == {"status": "ok"}
    assert http("GET", base + "/ops/workers").json() == []


def test_worker_names_in_utf8_are_found_from_the_latin1_path_info(
    serve_wsgi: Callable[[Any], str],
) -> None:
    name = f"zürich-{uuid.uuid4().hex[:6]}"
    worker = varmq.new_worker(lambda job: None, 1, name=name)
    try:
        base = serve_wsgi(wsgi_app(workers={name: worker}, insecure=True))
        reply = http("GET", base + "/workers/" + "z%C3%BCrich" + name[len("zürich") :])
        assert reply.status == 200
        assert reply.json()["name"] == name
    finally:
        worker.stop()
        assert worker.wait_until_stopped(10)
