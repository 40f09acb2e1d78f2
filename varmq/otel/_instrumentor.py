"""The instrumentor and the observer it installs (:mod:`varmq.contract.observe`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Mapping
from importlib import metadata
from typing import Any

from ..contract import observe
from ..model.errors import JobCancelledError, JobTimeoutError
from ..model.retry import Outcome
from ..model.tracing import task_of

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError(
        "varmq.otel needs the OpenTelemetry API: pip install 'varmq[otel]' "
        "(and an SDK with an exporter to send the spans somewhere)"
    ) from exc

__all__ = ["VarmqInstrumentor"]

log = logging.getLogger("varmq.otel")

#: The value of ``messaging.system`` on every span.
SYSTEM = "varmq"

_OUTCOMES = {
    Outcome.OK: "ok",
    Outcome.FAILED: "failed",
    Outcome.RETRIED: "retried",
    Outcome.DEAD: "dead",
}


def _version() -> str:
    try:
        return metadata.version("varmq")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a bare checkout
        return "0"


class _Send:
    """A producer span: started before the job is stored, ended when the storage answered."""

    __slots__ = ("_span", "carrier")

    def __init__(self, span: trace.Span) -> None:
        self._span = span
        self.carrier: dict[str, str] = {}
        propagate.inject(self.carrier, context=trace.set_span_in_context(span))

    def end(self, job_id: str | None, error: BaseException | None, stored: bool) -> None:
        span = self._span
        if job_id:
            span.set_attribute("messaging.message.id", job_id)
        if error is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        elif not stored:
            span.set_attribute("varmq.refused", True)
        span.end()


class _Run:
    """A consumer span: current in the thread (or task) running the job until it returned,
    ended where the run was settled."""

    __slots__ = ("_span", "_token")

    def __init__(self, span: trace.Span) -> None:
        self._span = span
        self._token = otel_context.attach(trace.set_span_in_context(span))

    def detach(self) -> None:
        otel_context.detach(self._token)

    def end(self, error: BaseException | None, outcome: Any) -> None:
        span = self._span
        if outcome is not None:
            span.set_attribute("varmq.job.outcome", _OUTCOMES.get(outcome, str(outcome)))
        if isinstance(error, JobTimeoutError):
            span.set_attribute("varmq.job.timed_out", True)
            span.set_status(Status(StatusCode.ERROR, f"timed out after {error.timeout:g} s"))
            span.record_exception(error)
        elif isinstance(error, JobCancelledError):
            span.set_attribute("varmq.job.cancelled", True)
            span.set_status(Status(StatusCode.ERROR, "cancelled by id"))
        elif error is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        elif outcome is None:
            span.set_status(Status(StatusCode.ERROR, "settling the run failed"))
        span.end()


class _Tracing:
    """The observer: makes the spans with the instrumentor's tracer."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer

    def send(self, destination: str, operation: str, job_id: str | None) -> _Send:
        publish = operation == "publish"
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.destination.name": destination,
            "messaging.operation.type": "send",
            "messaging.operation.name": "publish" if publish else "send",
        }
        if job_id:
            attributes["messaging.message.id"] = job_id
        if operation == "occurrence":
            attributes["varmq.schedule.occurrence"] = True
        name = f"{'publish' if publish else 'send'} {destination}"
        span = self._tracer.start_span(name, kind=SpanKind.PRODUCER, attributes=attributes)
        return _Send(span)

    def process(self, destination: str, job: Any, carrier: Mapping[str, str] | None) -> _Run:
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.destination.name": destination,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "varmq.job.attempt": job.attempt,
        }
        if job.id:
            attributes["messaging.message.id"] = job.id
        task = task_of(job.data)
        if task is not None:
            attributes["varmq.task.name"] = task
        # Every attempt is a child of its producer's span: one trace from the request that
        # added the job to each of its runs (the attempt number tells retries apart).
        parent = propagate.extract(carrier) if carrier else None
        span = self._tracer.start_span(
            f"process {destination}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
        )
        return _Run(span)


class VarmqInstrumentor:
    """Traces varmq's producers and job runs (the OpenTelemetry instrumentor convention).

    ``VarmqInstrumentor().instrument(tracer_provider=None)`` starts tracing (the global tracer
    provider unless one is given); ``uninstrument()`` stops it: adds and runs after it make no
    spans, runs under way end theirs. The class is a singleton, like OpenTelemetry's own
    instrumentors: every ``VarmqInstrumentor()`` is the same object. Instrumenting twice logs a
    warning and changes nothing.
    """

    _instance: VarmqInstrumentor | None = None
    _instance_lock = threading.Lock()

    def __new__(cls) -> VarmqInstrumentor:
        with cls._instance_lock:
            if cls._instance is None:
                instance = super().__new__(cls)
                instance._observer = None
                cls._instance = instance
            return cls._instance

    _observer: _Tracing | None

    @property
    def is_instrumented_by_opentelemetry(self) -> bool:
        """Whether :meth:`instrument` is in effect."""
        return self._observer is not None

    def instrumentation_dependencies(self) -> Collection[str]:
        """The packages this instruments (the convention's declaration)."""
        return ("varmq",)

    def instrument(self, **kwargs: Any) -> None:
        """Start tracing. Keyword ``tracer_provider``: the provider to get the tracer from (the
        global one when left out); other keywords are accepted and ignored, as the convention
        asks."""
        with self._instance_lock:
            if self._observer is not None:
                log.warning("varmq.otel: already instrumented; instrument() did nothing")
                return
            tracer = trace.get_tracer(
                "varmq", _version(), tracer_provider=kwargs.get("tracer_provider")
            )
            self._observer = _Tracing(tracer)
            observe.install(self._observer)

    def uninstrument(self, **kwargs: Any) -> None:
        """Stop tracing (nothing if not instrumented)."""
        with self._instance_lock:
            if self._observer is None:
                return
            observe.uninstall(self._observer)
            self._observer = None
