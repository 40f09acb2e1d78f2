"""Tracing with varmq.otel, in one process: producer and consumer spans, their parents, their
attributes and statuses, and what is left when tracing is off (the cross-process test is
tests/acceptance/test_trace_processes.py)."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import varmq
from tests.unit.conftest import poll_until
from varmq.contract import envelope, observe
from varmq.ops.json_logs import JsonFormatter, RunContext
from varmq.otel import VarmqInstrumentor
from varmq.testing import MemoryStorage

WAIT = 10.0


class Traced:
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("app")

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name == name]

    def wait_for(self, name: str, count: int = 1) -> list[ReadableSpan]:
        assert poll_until(lambda: len(self.named(name)) >= count, WAIT), self.spans()
        return self.named(name)


@pytest.fixture
def traced() -> Iterator[Traced]:
    setup = Traced()
    VarmqInstrumentor().instrument(tracer_provider=setup.provider)
    yield setup
    VarmqInstrumentor().uninstrument()


def _parent(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def _ids(span: ReadableSpan) -> tuple[int, int]:
    context = span.get_span_context()
    assert context is not None
    return context.trace_id, context.span_id


def test_an_in_memory_job_runs_in_the_trace_of_the_request_that_added_it(traced: Traced) -> None:
    def run(job: varmq.Job[str]) -> None:
        with traced.tracer.start_as_current_span("inside"):
            pass

    worker = varmq.new_worker(run, concurrency=2)
    queue = worker.bind_queue()
    with traced.tracer.start_as_current_span("request") as request:
        job = queue.add("x", job_id="j-1")
    assert job is not None and job.wait(WAIT)
    [process] = traced.wait_for(f"process {job_queue(worker)}")
    [send] = [s for s in traced.spans() if s.kind is SpanKind.PRODUCER]
    [inside] = traced.named("inside")
    trace_id = request.get_span_context().trace_id
    assert _ids(send)[0] == _ids(process)[0] == _ids(inside)[0] == trace_id
    assert _parent(send) == request.get_span_context().span_id
    assert _parent(process) == _ids(send)[1]
    assert _parent(inside) == _ids(process)[1]
    assert process.kind is SpanKind.CONSUMER
    assert dict(process.attributes or {}) == {
        "messaging.system": "varmq",
        "messaging.destination.name": job_queue(worker),
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.message.id": "j-1",
        "varmq.job.attempt": 1,
        "varmq.job.outcome": "ok",
    }
    assert send.attributes is not None and send.attributes["messaging.message.id"] == "j-1"


def job_queue(worker: Any) -> str:
    """The label of the worker's one queue (what spans name as their destination)."""
    [row] = worker.queue_stats()
    return str(row["name"])


def test_every_attempt_of_a_stored_job_is_a_child_of_its_producer_with_its_number(
    traced: Traced, storage: MemoryStorage
) -> None:
    attempts: list[int] = []

    def flaky(job: varmq.Job[str]) -> None:
        attempts.append(job.attempt)
        if job.attempt == 1:
            raise ValueError("first try fails")

    worker = varmq.new_worker(flaky, retry=varmq.Retry(max_attempts=2, backoff=0.01))
    handle = worker.with_persistent_queue(storage.new_queue("flaky"))
    with traced.tracer.start_as_current_span("request"):
        assert handle.add("x", job_id="j-2")
    runs = sorted(traced.wait_for(f"process {job_queue(worker)}", 2), key=_attempt)
    [send] = [s for s in traced.spans() if s.kind is SpanKind.PRODUCER]
    assert [_attempt(r) for r in runs] == [1, 2]
    for run in runs:
        assert _parent(run) == _ids(send)[1]
        assert _ids(run)[0] == _ids(send)[0]
    failed, ok = runs
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "ValueError: first try fails"
    assert [e.name for e in failed.events] == ["exception"]
    assert failed.attributes is not None and failed.attributes["varmq.job.outcome"] == "retried"
    assert ok.status.status_code is StatusCode.UNSET


def _attempt(span: ReadableSpan) -> int:
    assert span.attributes is not None
    return int(span.attributes["varmq.job.attempt"])  # type: ignore[arg-type]


def test_an_async_job_functions_own_spans_are_children_of_its_run(traced: Traced) -> None:
    async def run(job: varmq.Job[str]) -> None:
        await asyncio.sleep(0)
        with traced.tracer.start_as_current_span("inside async"):
            pass

    worker = varmq.new_worker(run, concurrency=2)
    queue = worker.bind_queue()
    job = queue.add("x")
    assert job is not None and job.wait(WAIT)
    [process] = traced.wait_for(f"process {job_queue(worker)}")
    [inside] = traced.wait_for("inside async")
    assert _parent(inside) == _ids(process)[1]


def test_a_run_past_its_timeout_ends_its_span_at_the_timeout_saying_so(traced: Traced) -> None:
    release = threading.Event()

    def stuck(job: varmq.Job[str]) -> None:
        release.wait(WAIT)

    worker = varmq.new_worker(stuck, timeout=0.05)
    queue = worker.bind_queue()
    queue.add("x")
    try:
        # Ended while the function still runs: the span does not wait for it to return.
        [process] = traced.wait_for(f"process {job_queue(worker)}")
        assert process.status.status_code is StatusCode.ERROR
        assert process.status.description == "timed out after 0.05 s"
        assert process.attributes is not None
        assert process.attributes["varmq.job.timed_out"] is True
    finally:
        release.set()


def test_a_run_cancelled_by_id_says_so(traced: Traced, storage: MemoryStorage) -> None:
    started, release = threading.Event(), threading.Event()

    def slow(job: varmq.Job[str]) -> None:
        started.set()
        release.wait(WAIT)

    worker = varmq.new_worker(slow)
    handle = worker.with_persistent_queue(storage.new_queue("kept", keep_results=60))
    assert handle.add("x", job_id="to-cancel")
    try:
        assert started.wait(WAIT)
        assert handle.cancel("to-cancel")
        [process] = traced.wait_for(f"process {job_queue(worker)}")
        assert process.status.status_code is StatusCode.ERROR
        assert process.status.description == "cancelled by id"
    finally:
        release.set()


def test_a_publish_is_a_producer_span_named_for_its_topic(traced: Traced) -> None:
    topics = varmq.new_topics()
    subscription = topics.subscribe("orders.*")
    with traced.tracer.start_as_current_span("request") as request:
        assert topics.publish("orders.created", {"n": 1}, message_id="m-1") == 1
    [publish] = traced.named("publish orders.created")
    assert publish.kind is SpanKind.PRODUCER
    assert _parent(publish) == request.get_span_context().span_id
    assert publish.attributes is not None
    assert publish.attributes["messaging.operation.name"] == "publish"
    assert publish.attributes["messaging.message.id"] == "m-1"
    subscription.unsubscribe()


def test_after_uninstrument_nothing_is_traced_and_the_envelope_has_no_trace(
    storage: MemoryStorage,
) -> None:
    setup = Traced()
    instrumentor = VarmqInstrumentor()
    assert instrumentor is VarmqInstrumentor()  # one instrumentor, as OpenTelemetry's are
    instrumentor.instrument(tracer_provider=setup.provider)
    assert instrumentor.is_instrumented_by_opentelemetry
    instrumentor.uninstrument()
    assert not instrumentor.is_instrumented_by_opentelemetry
    assert observe.OBSERVER is None
    worker = varmq.new_worker(lambda job: None)
    handle = worker.with_persistent_queue(storage.new_queue("plain"))
    assert handle.add("x", job_id="plain")
    worker.wait_until_idle(timeout=WAIT)
    assert setup.spans() == []


def test_instrumenting_twice_warns_and_keeps_one_observer(
    traced: Traced, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="varmq.otel"):
        VarmqInstrumentor().instrument(tracer_provider=traced.provider)
    assert "already instrumented" in caplog.text
    assert len(observe.installed()) == 1


def test_a_stored_job_carries_its_trace_context_in_an_optional_envelope_field() -> None:
    raw = envelope.encode("j", {"a": 1}, trace={"traceparent": "00-ab-cd-01"})
    assert json.loads(raw)["trace"] == {"traceparent": "00-ab-cd-01"}
    assert envelope.decode(raw).trace == {"traceparent": "00-ab-cd-01"}
    assert "trace" not in json.loads(envelope.encode("j", 1))
    # A trace field that is not an object of strings joins nothing, and fails no job.
    bad = b'{"id":"j","status":"Created","data":1,"trace":{"traceparent":7}}'
    assert envelope.decode(bad) == ("j", 1, None, None)


def test_a_job_whose_trace_field_is_damaged_still_runs(
    traced: Traced, storage: MemoryStorage
) -> None:
    stored = storage.new_queue("damaged")
    stored.enqueue(b'{"id":"d","status":"Created","data":5,"trace":["not", "an", "object"]}')
    ran: list[int] = []
    worker = varmq.new_worker(lambda job: ran.append(job.data))
    worker.with_persistent_queue(stored)
    assert worker.wait_until_idle(timeout=WAIT) is not False
    assert poll_until(lambda: ran == [5], WAIT)
    [process] = traced.wait_for(f"process {job_queue(worker)}")
    assert process.parent is None  # no producer context: a trace of its own


def test_importing_and_running_varmq_never_imports_opentelemetry() -> None:
    # Not redisq: redis-py 8 imports OpenTelemetry itself when it is installed.
    code = (
        "import sys, varmq, sqliteq, tempfile, os\n"
        "w = varmq.new_worker(lambda job: None)\n"
        "q = w.with_persistent_queue(sqliteq.new(os.path.join(tempfile.mkdtemp(), 'j.db'))"
        ".new_queue('q'))\n"
        "q.add(1); w.wait_until_idle(timeout=10); w.stop()\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"


def test_json_log_lines_of_a_job_name_its_queue_job_attempt_task_and_span(traced: Traced) -> None:
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(self.format(record))

    handler = Keep()
    handler.setFormatter(JsonFormatter())
    user_log = logging.getLogger("tests.jobs")
    user_log.addHandler(handler)
    user_log.setLevel(logging.INFO)
    varmq_log = logging.getLogger("varmq.worker")
    varmq_log.addHandler(handler)
    context = RunContext()
    observe.install(context)
    try:

        def run(job: varmq.Job[dict[str, Any]]) -> None:
            user_log.info("charging %s", job.data["args"][0])
            raise ValueError("card declined")

        worker = varmq.new_worker(run, log_failures=True)
        queue = worker.bind_queue()
        job = queue.add({"task": "charge", "args": [42], "kwargs": {}}, job_id="pay-1")
        assert job is not None
        job.wait(WAIT)
        assert poll_until(lambda: len(records) >= 2, WAIT), records
    finally:
        observe.uninstall(context)
        user_log.removeHandler(handler)
        varmq_log.removeHandler(handler)
    inside, failed = (json.loads(line) for line in records[:2])
    [process] = traced.wait_for(f"process {job_queue(worker)}")
    trace_id, span_id = _ids(process)
    assert inside["message"] == "charging 42"
    assert inside["level"] == "INFO"
    for line in (inside, failed):
        assert line["queue"] == job_queue(worker)
        assert line["job_id"] == "pay-1"
        assert line["attempt"] == 1
        assert line["task"] == "charge"
    assert inside["trace_id"] == format(trace_id, "032x")
    assert inside["span_id"] == format(span_id, "016x")
    assert failed["level"] == "WARNING"
    assert "ValueError: card declined" in failed["exception"]


def test_every_run_a_timeout_settles_ends_its_span_however_soon_it_comes(traced: Traced) -> None:
    # The timer may settle a run the moment it is watched: the span must exist by then.
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # hand the GIL around often: the gap, if any, shows
    try:
        ran = threading.Semaphore(0)

        def slow(job: varmq.Job[int]) -> None:
            time.sleep(0.001)
            ran.release()

        worker = varmq.new_worker(slow, 4, timeout=1e-4)
        queue = worker.bind_queue()
        jobs = [queue.add(i) for i in range(300)]
        for _ in range(300):
            assert ran.acquire(timeout=WAIT)
        assert worker.wait(WAIT)
    finally:
        sys.setswitchinterval(previous)
    label = f"process {job_queue(worker)}"
    assert poll_until(lambda: len(traced.named(label)) == 300, WAIT), len(traced.named(label))
    assert all(j is not None and (j._extra is None or j._extra.attempt is None) for j in jobs)
