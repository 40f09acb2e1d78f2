"""Tracing across processes: a producer process adds jobs inside a request's span, a consumer
process runs them, and the consumer's spans land in the producer's trace (sqliteq and redisq;
the actors are tests/acceptance/trace_actors.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.process_tools import STORES, expect_line, spawn, store_url

ACTORS = "tests.acceptance.trace_actors"


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url(request, tmp_path)


def _spans(path: Path) -> list[dict[str, Any]]:
    spans: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    return spans


def _one(spans: list[dict[str, Any]], **wanted: Any) -> dict[str, Any]:
    found = [
        s
        for s in spans
        if all(s.get(k) == v or s["attributes"].get(k) == v for k, v in wanted.items())
    ]
    assert len(found) == 1, (wanted, spans)
    return found[0]


def test_the_consumers_span_of_each_job_is_in_the_trace_of_the_request_that_added_it(
    store: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[str]],
    request: pytest.FixtureRequest,
) -> None:
    queue = f"traced-{request.node.callspec.id}"
    consumed, produced = tmp_path / "consumer.json", tmp_path / "producer.json"
    consumer = spawn(ACTORS, "consume", store, queue, str(consumed), "2")
    processes.append(consumer)
    expect_line(consumer, "ready")
    producer = spawn(ACTORS, "produce", store, queue, str(produced))
    processes.append(producer)
    assert producer.wait(timeout=60) == 0
    assert consumer.wait(timeout=60) == 0

    sent = _spans(produced)
    request_span = _one(sent, name="request")
    sends = {s["attributes"]["messaging.message.id"]: s for s in sent if s["kind"] == "PRODUCER"}
    assert set(sends) == {"job-ok", "job-bad"}
    for send in sends.values():
        assert send["trace_id"] == request_span["trace_id"]
        assert send["parent_id"] == request_span["span_id"]
        assert send["name"] == f"send {queue}"
        assert send["attributes"]["messaging.operation.type"] == "send"

    ran = _spans(consumed)
    for job_id in ("job-ok", "job-bad"):
        process = _one(ran, kind="CONSUMER", **{"messaging.message.id": job_id})
        assert process["name"] == f"process {queue}"
        assert process["trace_id"] == request_span["trace_id"]
        assert process["parent_id"] == sends[job_id]["span_id"]
        attributes = process["attributes"]
        assert attributes["messaging.system"] == "varmq"
        assert attributes["messaging.destination.name"] == queue
        assert attributes["messaging.operation.type"] == "process"
        assert attributes["varmq.job.attempt"] == 1
    good = _one(ran, kind="CONSUMER", **{"messaging.message.id": "job-ok"})
    assert good["status"] == "UNSET"
    inside = _one(ran, name="inside")
    assert inside["parent_id"] == good["span_id"]  # the function's own span is a child
    bad = _one(ran, kind="CONSUMER", **{"messaging.message.id": "job-bad"})
    assert bad["status"] == "ERROR"
    assert bad["events"] == ["exception"]
