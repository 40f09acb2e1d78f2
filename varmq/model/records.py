"""Job records as values: :class:`JobRecord`, :class:`JobError` and :class:`JobProgress`, and
outcomes and progress as the bytes a storage keeps.

A queue that keeps records (a storage queue opened with ``keep_results``, see
:class:`~varmq.contract.protocols.IJobRecords`; or an in-memory queue bound with
``keep_results``) remembers every job added with an id: its state, attempts, times and outcome.
Outcomes are JSON (:func:`encode_result`, :func:`encode_error`): a result or an error is never
pickled, so reading a record can never run code. So is the progress a running job gives
(:func:`encode_progress`). No I/O here; following a job by id from any
process is :mod:`varmq.api.records`.
"""

from __future__ import annotations

import json
import traceback
from dataclasses import dataclass
from typing import Any

from ..contract.envelope import JSON_ENCODER
from ..contract.protocols import ENDED_STATES, StoredJobRecord
from .errors import JobFailedError

__all__ = [
    "JobError",
    "JobProgress",
    "JobRecord",
    "decode_progress",
    "decode_record",
    "encode_error",
    "encode_progress",
    "encode_result",
    "error_of",
]

# Longest message and traceback an error record keeps; longer ones keep their start and end.
_TEXT_LIMIT = 16_384


@dataclass(frozen=True)
class JobError:
    """What a job record keeps of the exception a job ended with: its class name, its message
    and the traceback as text (never the exception object)."""

    type: str
    message: str
    traceback: str = ""


@dataclass(frozen=True)
class JobProgress:
    """How far a job said it got (``job.set_progress``): ``fraction`` from 0.0 to 1.0 and the
    ``message`` given with it (``None`` without one)."""

    fraction: float
    message: str | None = None


@dataclass(frozen=True)
class JobRecord:
    """One job as its queue remembers it (``handle.job(job_id)``), at the time it was read.

    ``state`` is one of ``"queued"``, ``"delayed"``, ``"running"``, ``"succeeded"``,
    ``"failed"``, ``"dead"`` and ``"cancelled"`` (the last four: it ended). ``attempts``
    counts its runs so far. ``result`` is the value the function returned (``"succeeded"``,
    result workers; ``None`` otherwise), ``error`` what it raised (:class:`JobError`, for
    ``"failed"``, ``"dead"``, and ``"cancelled"`` while it ran). The times are Unix seconds
    (the storage's clock: the server's for Redis); ``None`` until they happened.
    ``cancel_requested`` is ``True`` once ``cancel`` flagged it while it ran. ``progress`` is
    the last :class:`JobProgress` its function set in its latest run (``None`` when it set
    none); a new run (a retry, a redelivery) starts without one.
    """

    id: str
    state: str
    attempts: int
    result: Any = None
    error: JobError | None = None
    enqueued_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    cancel_requested: bool = False
    progress: JobProgress | None = None

    @property
    def ended(self) -> bool:
        """Whether the job will not run again (succeeded, failed, dead or cancelled)."""
        return self.state in ENDED_STATES

    def value(self) -> Any:
        """The result of a job that succeeded; :class:`~varmq.JobFailedError` for any other end.

        Only for an ended record (``ValueError`` otherwise).
        """
        if self.state == "succeeded":
            return self.result
        if not self.ended:
            raise ValueError(f"varmq: job {self.id!r} has not ended (it is {self.state})")
        error = self.error
        if error is None:
            message = ""
            if self.state == "cancelled":  # removed from the line: it did not run (again)
                message = (
                    "before it ran" if not self.attempts else f"before attempt {self.attempts + 1}"
                )
            raise JobFailedError(self.id, self.state, "", message)
        raise JobFailedError(self.id, self.state, error.type, error.message, error.traceback)


# -- outcomes as bytes ----------------------------------------------------------------------


_NULL = b"null"  # None, the value of most jobs, has one answer


def encode_result(value: Any) -> bytes:
    """``value`` as the JSON bytes a record keeps; raises ``TypeError`` or ``ValueError`` (with
    the reason) for a value JSON cannot hold."""
    if value is None:
        return _NULL
    try:
        return JSON_ENCODER.encode(value).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"it holds text that is not valid Unicode ({exc.reason})") from None
    except RecursionError:
        raise ValueError("it is nested too deeply for JSON") from None
    except (TypeError, ValueError) as exc:
        raise type(exc)(str(exc)) from None


def _cut(text: str) -> str:
    if len(text) <= _TEXT_LIMIT:
        return text
    keep = _TEXT_LIMIT // 2
    return f"{text[:keep]}\n... [{len(text) - 2 * keep} characters cut] ...\n{text[-keep:]}"


def _message(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:  # a __str__ that raises: the record still says what it was
        return f"<{type(error).__name__} whose str() raised>"


def error_of(error: BaseException) -> JobError:
    """What a record keeps of ``error``: class name, message and traceback text (cut to 16 KiB
    each, keeping their start and end)."""
    if error.__traceback__ is None:
        trace = ""
    else:
        trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    return JobError(type(error).__name__, _cut(_message(error)), _cut(trace))


def encode_error(error: BaseException) -> bytes:
    """The JSON bytes a record keeps of ``error``: ``{"type", "message", "traceback"}``."""
    kept = error_of(error)
    fields = {"type": kept.type, "message": kept.message, "traceback": kept.traceback}
    return json.dumps(fields, separators=(",", ":")).encode("ascii")  # ASCII: always encodable


def _decode_error(raw: bytes | None) -> JobError | None:
    if raw is None:
        return None
    try:
        fields = json.loads(bytes(raw).decode("utf-8"))
        return JobError(str(fields["type"]), str(fields["message"]), str(fields["traceback"]))
    except (ValueError, KeyError, TypeError):  # written by something else: kept as text
        return JobError("", bytes(raw).decode("utf-8", "replace"))


def _decode_result(raw: bytes | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(bytes(raw).decode("utf-8"))
    except ValueError:  # written by something else than a varmq worker: handed over as is
        return bytes(raw)


def encode_progress(fraction: float, message: str | None) -> bytes:
    """The JSON bytes a record keeps of a progress (checked by ``set_progress`` already):
    ``{"fraction", "message"}``."""
    fields = {"fraction": fraction, "message": message}
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_progress(raw: bytes | None) -> JobProgress | None:
    """The :class:`JobProgress` of ``raw`` (:func:`encode_progress`'s bytes); ``None`` for none,
    and for bytes that are not a progress (written by something else than a varmq worker)."""
    if raw is None:
        return None
    try:
        fields = json.loads(bytes(raw).decode("utf-8"))
        fraction, message = fields["fraction"], fields.get("message")
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        return None
    if not 0.0 <= fraction <= 1.0 or not (message is None or isinstance(message, str)):
        return None
    return JobProgress(float(fraction), message)


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value)


def decode_record(stored: StoredJobRecord) -> JobRecord:
    """A storage's record as a :class:`JobRecord`: its result and error decoded from JSON."""
    return JobRecord(
        id=str(stored["id"]),
        state=str(stored["state"]),
        attempts=int(stored["attempts"]),
        result=_decode_result(stored["result"]),
        error=_decode_error(stored["error"]),
        enqueued_at=_seconds(stored["enqueued_at"]),
        started_at=_seconds(stored["started_at"]),
        finished_at=_seconds(stored["finished_at"]),
        cancel_requested=bool(stored["cancel_requested"]),
        progress=decode_progress(stored.get("progress")),
    )
