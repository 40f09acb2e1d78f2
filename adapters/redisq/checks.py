"""What redisq accepts and returns: the queue options, the argument rules, the records.

The rules are those every varmq storage shares (``varmq.protocols``, "Arguments and options");
redisq does not import varmq, so they are copied here, and the conformance suite keeps the
copy in line. A wrong type raises ``TypeError``, a value out of range ``ValueError``; each
message starts with ``subject`` (the queue and the server) and names the argument and the
value. The defaults are written here and nowhere else. No state, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, NamedTuple, TypedDict

__all__ = [
    "MAX_DELAY",
    "DeadLetterRecord",
    "QueueOptions",
    "QueueSettings",
    "QueueStats",
    "StoredJobRecord",
    "as_bytes",
    "check",
    "check_job_id",
    "check_keys",
    "check_name",
    "delay_ms",
    "error_text",
    "queue_settings",
]

MAX_NAME_BYTES = 200  # longest queue name, in bytes of UTF-8
MAX_DELAY = 3_153_600_000.0  # seconds: 100 years of 365 days; also the longest retention age
MAX_LEASE = 604_800.0  # seconds: the longest visibility_timeout, seven days
MAX_PRIORITY = 2**53  # priorities run from -MAX_PRIORITY to MAX_PRIORITY
MAX_COUNT = 2**63 - 1  # the largest capacity, limit or batch size: a 64-bit integer


class QueueOptions(TypedDict, total=False):
    """The keyword options of every ``Queues.new_*`` call and ``open_queue``; all optional.

    - ``visibility_timeout``: seconds a taken job stays leased unless the lease is extended;
      then it can be taken again (default 300, at most 7 days);
    - ``dead_letter_limit`` and ``dead_letter_max_age``: dead letters kept per queue and their
      longest age in seconds (defaults 10,000 and 7 days), pruned (up to 100 of each) whenever
      the queue object shelves one;
    - ``keep_results``: seconds a job record is kept after its job ended (default 0: no
      records; at most 100 years), and ``keep_results_limit``: ended records kept per queue
      (default 10,000), the oldest beyond it dropped whenever the queue object ends a job.
    """

    visibility_timeout: float
    dead_letter_limit: int
    dead_letter_max_age: float
    keep_results: float
    keep_results_limit: int


@dataclass(frozen=True)
class QueueSettings:
    """The options of one queue object, checked; the defaults are written here only."""

    visibility_timeout: float = 300.0
    dead_letter_limit: int = 10_000
    dead_letter_max_age: float = 604_800.0
    keep_results: float = 0.0
    keep_results_limit: int = 10_000


class QueueStats(TypedDict):
    """What ``stats()`` returns (varmq's ``QueueStats``)."""

    waiting: int
    in_flight: int
    delayed: int
    dead: int
    oldest_age: float


class DeadLetterRecord(TypedDict):
    """One entry of ``dead_letters()`` (varmq's ``DeadLetterRecord``)."""

    key: str
    item: bytes
    attempts: int
    error: str
    dead_at: float


class StoredJobRecord(TypedDict):
    """What ``job_record()`` returns (varmq's ``StoredJobRecord``)."""

    id: str
    state: str
    attempts: int
    result: bytes | None
    error: bytes | None
    enqueued_at: float
    started_at: float | None
    finished_at: float | None
    cancel_requested: bool


class _Rule(NamedTuple):
    integer: bool  # an int; else seconds, an int or a float
    least: float  # the lowest value allowed...
    above: bool  # ...or the value everything must be above
    most: float  # the highest value allowed
    expected: str  # what the message says is expected


_INF = math.inf
RULES: Mapping[str, _Rule] = {
    # queue options
    "visibility_timeout": _Rule(False, 0, True, MAX_LEASE, "seconds > 0, <= 7 days"),
    "dead_letter_limit": _Rule(True, 1, False, MAX_COUNT, "an int >= 1"),
    "dead_letter_max_age": _Rule(False, 0, True, MAX_DELAY, "seconds > 0, <= 100 years"),
    "keep_results": _Rule(False, 0, False, MAX_DELAY, "seconds >= 0, <= 100 years (0: off)"),
    "keep_results_limit": _Rule(True, 1, False, MAX_COUNT, "an int >= 1"),
    # arguments of queue methods
    "delay": _Rule(False, -_INF, False, MAX_DELAY, "finite seconds <= 100 years (<= 0: now)"),
    "priority": _Rule(True, -MAX_PRIORITY, False, MAX_PRIORITY, "an int within +-2**53"),
    "capacity": _Rule(True, 0, False, MAX_COUNT, "an int >= 0 (0: unlimited)"),
    "limit": _Rule(True, 0, False, MAX_COUNT, "an int >= 0"),
    "n": _Rule(True, -_INF, False, MAX_COUNT, "an int (<= 0: none)"),
}
_OPTIONS = tuple(option.name for option in fields(QueueSettings))


def check(subject: str, key: str, value: Any) -> Any:
    """Return ``value`` if it obeys the rule ``key``; raise ``TypeError``/``ValueError``."""
    rule = RULES[key]
    problem = f"{subject}: {key}={value!r}; expected {rule.expected}"
    if isinstance(value, bool) or not isinstance(value, int if rule.integer else (int, float)):
        raise TypeError(problem)
    low_ok = value > rule.least if rule.above else value >= rule.least
    if not (low_ok and value <= rule.most) or (
        isinstance(value, float) and not math.isfinite(value)
    ):
        raise ValueError(problem)
    return value


def delay_ms(subject: str, delay: Any) -> int:
    """A checked delay in whole milliseconds, rounded up (never early); 0 for ``<= 0``."""
    seconds = check(subject, "delay", delay)
    return math.ceil(seconds * 1000) if seconds > 0 else 0


def queue_settings(subject: str, options: Mapping[str, Any]) -> QueueSettings:
    """Check the keyword options of an opener and fill in the defaults."""
    for key, value in options.items():
        if key not in _OPTIONS:
            raise TypeError(
                f"{subject}: unknown option {key}={value!r}; expected {', '.join(_OPTIONS)}"
            )
        check(subject, key, value)
    return QueueSettings(**options)


def check_name(store: str, name: Any) -> str:
    """Return ``name`` if it is a queue name: a ``str`` of 1 to 200 bytes of UTF-8."""
    expected = f"expected a str of 1 to {MAX_NAME_BYTES} bytes in UTF-8"
    if not isinstance(name, str):
        raise TypeError(f"{store}: queue name {name!r}; {expected}")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        size = -1  # a lone surrogate: not text any storage can keep
    if not 0 < size <= MAX_NAME_BYTES:
        shown = repr(name) if len(name) <= 40 else f"{name[:40]!r}... ({len(name)} characters)"
        raise ValueError(f"{store}: queue name {shown}; {expected}")
    return name


def as_bytes(subject: str, item: Any, what: str = "item") -> bytes:
    """``item`` as the bytes to store: bytes-like as is, ``str`` as UTF-8; ``what`` names it in
    the error (``item``, ``result``, ``error``)."""
    if isinstance(item, bytes):
        return item
    if isinstance(item, (bytearray, memoryview)):
        return bytes(item)
    if isinstance(item, str):
        try:
            return item.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"{subject}: {what} is a str that UTF-8 cannot encode ({exc})"
            ) from None
    raise TypeError(f"{subject}: {what} of type {type(item).__name__}; expected bytes or str")


def check_job_id(subject: str, job_id: Any) -> str:
    """Return ``job_id`` if it is a job id: a non-empty ``str`` that UTF-8 can encode."""
    problem = f"{subject}: job_id={job_id!r}; expected a non-empty str"
    if not isinstance(job_id, str):
        raise TypeError(problem)
    try:
        size = len(job_id.encode("utf-8"))
    except UnicodeEncodeError:
        size = 0  # a lone surrogate: not text any storage can keep
    if not size:
        raise ValueError(problem)
    return job_id


def check_keys(subject: str, keys: Any) -> list[str] | None:
    """The dead-letter keys of ``requeue_dead`` as a list (``None``: all of them)."""
    if keys is None:
        return None
    if isinstance(keys, (str, bytes, bytearray)) or not isinstance(keys, Iterable):
        raise TypeError(f"{subject}: keys={keys!r}; expected None or a collection of str keys")
    chosen = list(keys)
    for key in chosen:
        if not isinstance(key, str):
            raise TypeError(f"{subject}: key {key!r} in keys; expected str keys")
    return chosen


def error_text(error: object) -> str:
    """The text of a dead letter's error, storable as UTF-8 (lone surrogates escaped)."""
    return str(error).encode("utf-8", "backslashreplace").decode("utf-8")
