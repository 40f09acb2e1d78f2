"""``varmq worker --log-format json``: one JSON object per log line, with the job it is about.

Each line has ``time`` (ISO 8601, UTC), ``level``, ``logger`` and ``message``, an
``exception`` when there is one, and, when the line is about a job: ``queue``, ``job_id``,
``attempt`` and ``task`` (a task's name). Those come from the record itself when varmq logged
it about a job (its ``varmq_*`` extras), else from the job running in the thread or task that
logged (a job function's own ``logging`` calls): :class:`RunContext`, an observer
(:mod:`varmq.contract.observe`), keeps the queue of the run in a context variable.

When :mod:`varmq.otel` traces, ``trace_id`` and ``span_id`` are those of the span current where
the line was logged (a job's ``process`` span inside its function), so a log line and its trace
join. OpenTelemetry is read only if something imported it already.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from ..contract import observe
from ..model.jobs import CURRENT_JOB
from ..model.tracing import task_of

__all__ = ["JsonFormatter", "RunContext", "use_json_logs"]

# The queue (label) of the job running in this thread or task; "" outside a run.
_RUN_QUEUE: contextvars.ContextVar[str] = contextvars.ContextVar("varmq_run_queue", default="")


class _Reset:
    __slots__ = ("_token",)

    def __init__(self, token: contextvars.Token[str]) -> None:
        self._token = token

    def detach(self) -> None:
        _RUN_QUEUE.reset(self._token)

    def end(self, error: BaseException | None, outcome: Any) -> None:
        pass


class _NoSend:
    """A send with nothing to store (log context is about runs only); never changed."""

    __slots__ = ("carrier",)

    def __init__(self) -> None:
        self.carrier: dict[str, str] = {}

    def end(self, job_id: str | None, error: BaseException | None, stored: bool) -> None:
        pass


_NO_SEND = _NoSend()


class RunContext:
    """The observer that tells log lines which queue the running job came from."""

    def send(self, destination: str, operation: str, job_id: str | None) -> _NoSend:
        return _NO_SEND

    def process(self, destination: str, job: Any, carrier: Mapping[str, str] | None) -> _Reset:
        return _Reset(_RUN_QUEUE.set(destination))


def _trace_ids() -> tuple[str, str] | None:
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON (see the module's docstring for the fields)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        job_id = getattr(record, "varmq_job_id", None)
        if job_id is not None:
            line["queue"] = getattr(record, "varmq_queue", None)
            line["job_id"] = job_id
            line["attempt"] = getattr(record, "varmq_attempt", None)
            task = getattr(record, "varmq_task", None)
        else:
            job = CURRENT_JOB.get(None)
            task = None
            if job is not None:
                line["queue"] = _RUN_QUEUE.get() or None
                line["job_id"] = job.id
                line["attempt"] = job.attempt
                task = task_of(job.data)
        if task is not None:
            line["task"] = task
        ids = _trace_ids()
        if ids is not None:
            line["trace_id"], line["span_id"] = ids
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def use_json_logs(level: str) -> None:
    """Log to stderr as JSON lines at ``level``, with the run context of each job."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler])
    observe.install(RunContext())
