"""OpenTelemetry tracing for varmq: ``VarmqInstrumentor().instrument()``.

Install the extra (``pip install varmq[otel]``: ``opentelemetry-api`` only) and bring your own
SDK and exporter. Once instrumented:

- every ``add``/``add_async`` (so a task's ``enqueue``), schedule occurrence and topic
  ``publish`` makes a ``PRODUCER`` span (``send <queue>``, ``publish <topic>``), child of the
  span current where it is called, and stores the W3C trace context with the job (an optional
  envelope field: older consumers ignore it);
- every run of a job makes a ``CONSUMER`` span (``process <queue>``) in the process that runs
  it, child of its producer's span, current while the function runs (the function's own spans
  are its children), with the messaging attributes of the OpenTelemetry semantic conventions,
  the attempt number, and status ``ERROR`` with the exception recorded when the run raised,
  timed out or was cancelled.

Nothing of this is imported by ``import varmq``: without the instrumentor installed, a job
costs one ``None`` check per add and per run. docs/observability.md has the attributes and how
logs and traces join.
"""

from __future__ import annotations

from ._instrumentor import VarmqInstrumentor

__all__ = ["VarmqInstrumentor"]
