"""Tracing a job from the request that added it to each of its attempts (OpenTelemetry).

    pip install 'varmq[otel]' opentelemetry-sdk
    python examples/tracing.py

A "request" span adds a job to a SQLite queue; the worker's first attempt fails, the retry
succeeds. The spans are printed as they end: ``send payments`` (child of the request), then two
``process payments`` spans (children of the send, attempts 1 and 2), all with one trace id.
"""

from __future__ import annotations

import os
import tempfile

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import sqliteq
import varmq
from varmq.otel import VarmqInstrumentor


class PrintSpans(SpanExporter):
    """Prints one line per span: name, trace id, its parent, status, attempt."""

    def export(self, spans: object) -> SpanExportResult:
        for span in spans:  # type: ignore[attr-defined]
            assert isinstance(span, ReadableSpan) and span.context is not None
            parent = f"{span.parent.span_id:016x}" if span.parent else "-" * 16
            attempt = (span.attributes or {}).get("varmq.job.attempt", "")
            print(
                f"{span.name:<18} trace {span.context.trace_id:032x} span "
                f"{span.context.span_id:016x} parent {parent} "
                f"{span.status.status_code.name:<5} {attempt}"
            )
        return SpanExportResult.SUCCESS


def main() -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(PrintSpans()))
    VarmqInstrumentor().instrument(tracer_provider=provider)
    tracer = provider.get_tracer("example")

    def charge(job: varmq.Job[dict[str, int]]) -> None:  # fails once, like a flaky provider
        with tracer.start_as_current_span("call the payment provider"):
            if job.attempt == 1:
                raise ConnectionError("provider timed out")

    with tempfile.TemporaryDirectory() as scratch:
        store = sqliteq.new(os.path.join(scratch, "jobs.db"))
        worker = varmq.new_worker(charge, retry=varmq.Retry(max_attempts=2, backoff=0.05))
        payments = worker.with_persistent_queue(store.new_queue("payments", keep_results=60))
        with tracer.start_as_current_span("POST /orders"):
            payments.add({"order": 7, "cents": 1250}, job_id="order-7")
        payments.result_of("order-7", timeout=10)  # the retry's result
        worker.stop()
        store.close()
    VarmqInstrumentor().uninstrument()


if __name__ == "__main__":
    main()
