"""The producer and consumer processes of the tracing acceptance test, run as ``python -m``.

    python -m tests.acceptance.trace_actors produce STORE QUEUE SPANS
    python -m tests.acceptance.trace_actors consume STORE QUEUE SPANS COUNT

Both set up the OpenTelemetry SDK with its in-memory exporter and instrument varmq. The
producer adds, inside a span named ``request``, the jobs ``ok`` (id ``job-ok``) and ``bad`` (id
``job-bad``) to QUEUE, as a web request would. The consumer prints ``ready`` once its worker is
bound, runs COUNT jobs (a job ``bad`` raises ``ValueError``; a job ``ok`` makes a span of its
own, ``inside``), and stops. Each writes the spans it finished to SPANS as JSON, one object per
span: name, kind, trace and span ids (hex), parent span id, status, attributes, events.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import varmq
from tests.acceptance.actors import open_store
from varmq.otel import VarmqInstrumentor

_EXPORTER = InMemorySpanExporter()
PROVIDER = TracerProvider()
PROVIDER.add_span_processor(SimpleSpanProcessor(_EXPORTER))


def _as_json(span: ReadableSpan) -> dict[str, Any]:
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": format(context.trace_id, "032x"),
        "span_id": format(context.span_id, "016x"),
        "parent_id": None if span.parent is None else format(span.parent.span_id, "016x"),
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
        "events": [event.name for event in span.events],
    }


def _write_spans(path: str) -> None:
    spans = [_as_json(span) for span in _EXPORTER.get_finished_spans()]
    with open(path, "w", encoding="utf-8") as out:
        json.dump(spans, out)


def produce(store: str, queue: str, spans: str) -> None:
    VarmqInstrumentor().instrument(tracer_provider=PROVIDER)
    queues = open_store(store)
    handle = varmq.new_distributed_queue(queues.new_distributed_queue(queue))
    with PROVIDER.get_tracer("app").start_as_current_span("request"):
        assert handle.add("ok", job_id="job-ok", strict=True)
        assert handle.add("bad", job_id="job-bad", strict=True)
    queues.close()
    _write_spans(spans)


def consume(store: str, queue: str, spans: str, count: int) -> None:
    VarmqInstrumentor().instrument(tracer_provider=PROVIDER)
    tracer = PROVIDER.get_tracer("app")
    done = threading.Semaphore(0)

    def run(job: varmq.Job[str]) -> None:
        try:
            if job.data == "bad":
                raise ValueError("bad job")
            with tracer.start_as_current_span("inside"):
                pass
        finally:
            done.release()

    queues = open_store(store)
    worker = varmq.new_worker(run, concurrency=2)
    worker.with_distributed_queue(queues.new_distributed_queue(queue))
    print("ready", flush=True)
    for _ in range(count):
        if not done.acquire(timeout=60):
            raise SystemExit("the jobs did not come")
    worker.wait_until_idle(timeout=30)
    worker.stop()
    queues.close()
    _write_spans(spans)


if __name__ == "__main__":
    command, *arguments = sys.argv[1:]
    if command == "produce":
        produce(*arguments)
    else:
        consume(arguments[0], arguments[1], arguments[2], int(arguments[3]))
