"""The JSON envelope a job is stored in: ``{"id": .., "status": "Created", "data": ..}``.

The only place that turns jobs into bytes and back. JSON only: nothing here can execute code
while decoding (no pickle).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

__all__ = ["EnvelopeError", "decode", "encode"]

# The "status" field is upstream's (Go varmq writes it, always "Created" at enqueue); it is
# written and accepted so that stored jobs stay readable by both.
_STATUSES = frozenset({"Created", "Queued", "Processing", "Finished", "Closed"})


class EnvelopeError(ValueError):
    """Bytes that are not a job envelope."""


def _default(value: Any) -> Any:
    # Dataclass instances are the common typed payload; everything else must be JSON already.
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def encode(job_id: str, data: Any, to_json: Callable[[Any], Any] | None = None) -> bytes | None:
    """Encode a job; ``None`` when ``data`` cannot be expressed as JSON.

    ``to_json`` converts the payload to plain JSON values first (the worker's payload hook).
    """
    try:
        payload = to_json(data) if to_json is not None else data
        body = json.dumps(
            {"id": job_id, "status": "Created", "data": payload},
            separators=(",", ":"),
            allow_nan=False,
            ensure_ascii=False,
            default=_default,
        )
    except (TypeError, ValueError, RecursionError):
        return None
    return body.encode("utf-8")


def decode(raw: bytes | bytearray | memoryview | str) -> tuple[str, Any]:
    """Decode envelope bytes into ``(job_id, data)``; raises :class:`EnvelopeError`."""
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
    return job_id, obj["data"]
