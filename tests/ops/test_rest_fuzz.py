"""A property-based fuzz of every REST route against the API's own OpenAPI description.

Any method on any route, with any worker, queue, action, concurrency, job id or limit, must
answer a status the description lists (or 401, 404, 405), with a JSON body: never a 500. The
app runs in this process as a WSGI callable, so thousands of requests take seconds.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import varmq
from varmq.ops.openapi import openapi
from varmq.rest import wsgi_app
from varmq.testing.storage import MemoryStorage

SPEC = openapi()
DOCUMENTED = {401, 404, 405} | {
    int(code)
    for route in SPEC["paths"].values()
    for operation in route.values()
    for code in operation["responses"]
}
NAMES = ["mem", "kept", "plain", "mem-q", "kept-q", "plain-q"]


@contextlib.contextmanager
def _app() -> Iterator[Any]:
    """An app over three fresh workers: in memory, storage with job records, storage without."""
    storage = MemoryStorage()
    made: dict[str, Any] = {}
    for name, queue in [
        ("mem", None),
        ("kept", storage.new_distributed_queue("kept-q", keep_results=60)),
        ("plain", storage.new_distributed_queue("plain-q")),
    ]:
        worker = varmq.new_worker(lambda job: None, 2)  # unnamed: served under `name`
        if queue is None:
            worker.bind_queue()
        else:
            worker.with_distributed_queue(queue).add("x", job_id="job-1")
        made[name] = worker
    try:
        yield wsgi_app(workers=made, insecure=True, control_timeout=5.0)
    finally:
        for worker in made.values():
            if worker.status.value not in ("Stopped", "Initiated"):
                worker.stop()


def _segment(choices: list[str]) -> st.SearchStrategy[str]:
    return st.sampled_from(choices) | st.text(min_size=0, max_size=12)


_VALUES = {
    "name": _segment(NAMES),
    "action": _segment(["pause", "resume", "stop", "restart", "start"]),
    "n": st.integers(-(2**40), 2**40).map(str) | st.text(max_size=12),
    "id": _segment(["job-1", "job-2"]),
}


@st.composite
def _requests(draw: st.DrawFn) -> tuple[str, str, str]:
    template = draw(st.sampled_from(sorted(SPEC["paths"])))
    path = template
    for name, values in _VALUES.items():
        path = path.replace("{" + name + "}", draw(values))
    method = draw(st.sampled_from(["GET", "PATCH", "DELETE", "POST", "PUT"]))
    query = draw(
        st.just("")
        | st.integers(-(2**33), 2**33).map(lambda n: f"limit={n}")
        | st.text(max_size=16).map(lambda t: f"limit={t}")
    )
    return method, path, query


def _call(app: Any, method: str, path: str, query: str) -> tuple[int, bytes]:
    answer: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        answer["status"] = int(status.split()[0])

    environ = {
        "REQUEST_METHOD": method,
        # PEP 3333: the path's UTF-8 bytes, decoded as latin-1.
        "PATH_INFO": path.encode("utf-8", "surrogatepass").decode("latin-1"),
        "QUERY_STRING": query,
        "wsgi.input": io.BytesIO(),
    }
    body = b"".join(app(environ, start_response))
    return answer["status"], body


@settings(
    max_examples=600,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(request=_requests())
def test_no_request_gets_a_500_or_an_undocumented_status(request: tuple[str, str, str]) -> None:
    with _app() as app:  # fresh workers: an earlier example's stop does not hide a route
        status, body = _call(app, *request)
    assert status != 500, (request, body)
    assert status in DOCUMENTED, (request, status, body)
    if body:
        json.loads(body)


@pytest.mark.parametrize("n", ["-3", "0"])
def test_a_concurrency_of_zero_or_less_means_the_cpu_count(n: str) -> None:
    worker = varmq.new_worker(lambda job: None, 1, name=f"tuned{n}")
    try:
        app = wsgi_app(workers={worker.name: worker}, insecure=True)
        status, body = _call(app, "PATCH", f"/workers/{worker.name}/config/concurrency/{n}", "")
        cpus = os.cpu_count() or 1
        if cpus == 1:
            assert status == 409  # already at the CPU count
        else:
            assert status == 200, body
        status, body = _call(app, "GET", f"/workers/{worker.name}", "")
        assert json.loads(body)["concurrency"] == cpus
    finally:
        worker.stop()


def test_the_description_is_served_and_names_every_route() -> None:
    with _app() as app:
        status, body = _call(app, "GET", "/openapi.json", "")
    assert status == 200
    served = json.loads(body)
    assert served["openapi"].startswith("3.1")
    assert set(served["paths"]) == set(SPEC["paths"])
