"""The JSON envelope a job is stored in: ``{"id": .., "status": "Created", "data": ..}``.

Upstream's three fields come first; a job added with a ``timeout`` also carries
``"timeout": <seconds>`` after them, so a producer can set it for the consumer, and a job added
while tracing is on carries ``"trace": {"traceparent": .., "tracestate": ..}`` (the W3C trace
context of its producer, :mod:`varmq.model.tracing`). Both are optional: a consumer that does not
know a field ignores it, and a ``"trace"`` that is not an object of strings is dropped rather
than failing the job (it only joins traces). The only place
in Python that turns jobs into bytes and back: queue handles :func:`encode` a job, sources
:func:`decode` it, and storage topics write the copies of a publish with :class:`Copies` (the
data encoded once, each copy only its id). One writer lives outside Python: redisq's
``topics.lua`` writes the copies of a publish in Redis, in this format (its header says so),
and the conformance suite decodes what every storage's publish wrote. JSON only: nothing here
can execute code while decoding (no pickle).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["JSON_ENCODER", "Copies", "Envelope", "EnvelopeError", "decode", "encode"]

# The "status" field is upstream's (Go varmq writes it, always "Created" at enqueue); it is
# written and accepted so that stored jobs stay readable by both.
_STATUSES = frozenset({"Created", "Queued", "Processing", "Finished", "Closed"})


class EnvelopeError(ValueError):
    """Bytes that are not a job envelope."""


class Envelope(NamedTuple):
    """A decoded envelope: the job's id, its data, its timeout (seconds) if it has one, and the
    trace context its producer stored, if any."""

    id: str
    data: Any
    timeout: float | None = None
    trace: dict[str, str] | None = None


def _default(value: Any) -> Any:
    # Dataclass instances are the common typed payload; everything else must be JSON already.
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise TypeError(f"a {type(value).__name__} has no JSON form ({value!r:.60})")


# Built once: json.dumps with any non-default argument builds a new encoder on every call, which
# was a large part of an add's time. encode() keeps no state, so it serves every thread; job
# records encode a result worker's value with it too (varmq.model.records.encode_result).
JSON_ENCODER = json.JSONEncoder(
    separators=(",", ":"), allow_nan=False, ensure_ascii=False, default=_default
)


def encode(
    job_id: str,
    data: Any,
    to_json: Callable[[Any], Any] | None = None,
    timeout: float | None = None,
    trace: dict[str, str] | None = None,
) -> bytes:
    """Encode a job as envelope bytes.

    ``to_json`` converts the payload to plain JSON values first (the worker's payload hook).
    Raises ``TypeError`` when ``data`` (or what ``to_json`` made of it) holds a value JSON has no
    form for, or ``to_json`` raised; ``ValueError`` for a value JSON cannot hold (NaN,
    infinity, a str with a lone surrogate, nesting too deep).
    """
    if to_json is not None:
        try:
            data = to_json(data)
        except Exception as exc:
            raise TypeError(f"payload_encoder raised {type(exc).__name__}: {exc}") from exc
    fields = {"id": job_id, "status": "Created", "data": data}
    if timeout is not None:
        fields["timeout"] = timeout
    if trace:
        fields["trace"] = trace
    try:
        return JSON_ENCODER.encode(fields).encode("utf-8")
    except TypeError as exc:
        raise TypeError(f"data is not JSON-encodable: {exc}") from None
    except UnicodeEncodeError as exc:
        raise ValueError(f"data holds text that is not valid Unicode: {exc.reason}") from None
    except RecursionError:
        raise ValueError("data is nested too deeply to encode as JSON") from None
    except ValueError as exc:
        raise ValueError(f"data is not JSON-encodable: {exc}") from None


class Copies:
    """The envelopes of the copies of one message: the same data under different job ids (a
    storage topic's publish). The data is encoded once, here; each copy costs its id.

    Raises ``TypeError`` naming the reason when ``data`` cannot be stored: no JSON form, a
    value JSON cannot hold (NaN, infinity), text that is not valid Unicode, nesting too deep.
    """

    __slots__ = ("_tail", "data_json", "trace_json")

    def __init__(self, data: Any, trace: dict[str, str] | None = None) -> None:
        try:
            text = JSON_ENCODER.encode(data)
            more = f',"trace":{JSON_ENCODER.encode(trace)}' if trace else ""
            tail = f',"status":"Created","data":{text}{more}}}'.encode()
        except UnicodeEncodeError as exc:
            raise TypeError(f"data holds text that is not valid Unicode: {exc.reason}") from None
        except RecursionError:
            raise TypeError("data is nested too deeply to encode as JSON") from None
        except (TypeError, ValueError) as exc:
            raise TypeError(f"data is not JSON-encodable: {exc}") from None
        #: The data alone as JSON text (what the ``"data"`` field holds).
        self.data_json = text
        #: The trace context as JSON text (what the ``"trace"`` field holds; "" for none).
        self.trace_json = more[9:]
        self._tail = tail

    def of(self, job_id: str) -> bytes:
        """The envelope bytes of the copy with ``job_id``."""
        return b'{"id":' + _quoted(job_id).encode() + self._tail


_quoted = json.encoder.encode_basestring  # a str as a JSON string, as JSON_ENCODER writes it


def decode(raw: bytes | bytearray | memoryview | str) -> Envelope:
    """Decode envelope bytes; raises :class:`EnvelopeError`."""
    try:
        text = raw if isinstance(raw, str) else bytes(raw).decode("utf-8")
        obj = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise EnvelopeError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise EnvelopeError(f"expected a JSON object, got {type(obj).__name__}")
    job_id = obj.get("id", "")
    if not isinstance(job_id, str):
        raise EnvelopeError("field 'id' is not a string")
    status = obj.get("status", "Created")
    if status not in _STATUSES:
        raise EnvelopeError(f"invalid status: {status!r}")
    if "data" not in obj:
        raise EnvelopeError("field 'data' is missing")
    timeout = obj.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0
    ):
        raise EnvelopeError(f"field 'timeout' is not a number of seconds > 0: {timeout!r}")
    trace = obj.get("trace")
    if trace is not None and not (
        isinstance(trace, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in trace.items())
    ):
        trace = None
    return Envelope(job_id, obj["data"], None if timeout is None else float(timeout), trace)
