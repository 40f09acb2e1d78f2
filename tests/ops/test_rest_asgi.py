"""The REST API as an ASGI app, under a real uvicorn server, over HTTP."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import uvicorn
from conftest import http
from rest_contract import RestContract

from varmq.rest import asgi_app


class TestAsgiApp(RestContract):
    factory = staticmethod(asgi_app)

    @pytest.fixture
    def serve(self, serve_asgi: Callable[[Any], str]) -> Callable[[Any], str]:
        return serve_asgi


def test_root_path_set_by_the_server_is_stripped_before_routing(
    serve_asgi: Callable[[Any], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # uvicorn's --root-path says "a proxy mounted us under /api": paths arrive without it.
    original = uvicorn.Config.__init__

    def with_root_path(self: uvicorn.Config, app: Any, **kw: Any) -> None:
        original(self, app, **{**kw, "root_path": "/api"})

    monkeypatch.setattr(uvicorn.Config, "__init__", with_root_path)
    base = serve_asgi(asgi_app(workers={}, insecure=True))
    assert http("GET", base + "/health").json() == {"status": "ok"}
