"""The argument rules every storage applies: one table of rules, one message format.

The rules are those of :mod:`varmq.contract.protocols` ("Arguments and options"); every storage
calls these functions instead of writing the checks again, so a wrong argument gets the same
answer from each. A wrong type raises ``TypeError``, a value out of range ``ValueError``; each
message starts with ``subject`` (the store and the queue) and names the argument and the value.

An adapter with options of its own subclasses :class:`QueueSettings` (and
:class:`QueueOptions`) and adds a :class:`Rule` per option to a copy of :data:`RULES`, then
passes both to :func:`queue_settings`. No state, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, NamedTuple, TypedDict, TypeVar, overload

from .protocols import (
    DEFAULT_DEAD_LETTER_LIMIT,
    DEFAULT_DEAD_LETTER_MAX_AGE,
    DEFAULT_KEEP_RESULTS,
    DEFAULT_KEEP_RESULTS_LIMIT,
    DEFAULT_MAX_PAYLOAD,
    DEFAULT_VISIBILITY_TIMEOUT,
    MAX_COUNT,
    MAX_DELAY,
    MAX_JOB_ID_BYTES,
    MAX_PRIORITY,
    MAX_QUEUE_NAME_BYTES,
    MAX_VISIBILITY_TIMEOUT,
)

__all__ = [
    "RULES",
    "QueueOptions",
    "QueueSettings",
    "Rule",
    "as_bytes",
    "payload",
    "check",
    "check_job_id",
    "check_keys",
    "check_name",
    "delay_ms",
    "error_text",
    "occurrence_mark",
    "queue_settings",
    "rate_limit",
]


class Rule(NamedTuple):
    """What one number must be: its kind, its range and how a message says so."""

    integer: bool
    """An ``int``; else seconds, an ``int`` or a ``float``."""
    least: float
    """The lowest value allowed..."""
    above: bool
    """...or, when ``True``, the value everything must be above."""
    most: float
    """The highest value allowed."""
    expected: str
    """What the message says is expected."""


_INF = math.inf
RULES: Mapping[str, Rule] = {
    # queue options
    "visibility_timeout": Rule(False, 0, True, MAX_VISIBILITY_TIMEOUT, "seconds > 0, <= 7 days"),
    "dead_letter_limit": Rule(True, 1, False, MAX_COUNT, "an int >= 1"),
    "dead_letter_max_age": Rule(False, 0, True, MAX_DELAY, "seconds > 0, <= 100 years"),
    "keep_results": Rule(False, 0, False, MAX_DELAY, "seconds >= 0, <= 100 years (0: off)"),
    "keep_results_limit": Rule(True, 1, False, MAX_COUNT, "an int >= 1"),
    "max_payload": Rule(True, 0, False, MAX_COUNT, "an int >= 0, in bytes (0: no limit)"),
    # option of a storage's topics()
    "dedup_ttl": Rule(False, 0, False, MAX_DELAY, "seconds >= 0, <= 100 years (0: keep none)"),
    # arguments of queue methods
    "delay": Rule(False, -_INF, False, MAX_DELAY, "finite seconds <= 100 years (<= 0: now)"),
    "priority": Rule(True, -MAX_PRIORITY, False, MAX_PRIORITY, "an int within +-2**53"),
    "capacity": Rule(True, 0, False, MAX_COUNT, "an int >= 0 (0: unlimited)"),
    "limit": Rule(True, 0, False, MAX_COUNT, "an int >= 0"),
    "n": Rule(True, -_INF, False, MAX_COUNT, "an int (<= 0: none)"),
}
"""The rule of every option and argument all storages share, by name."""


class QueueOptions(TypedDict, total=False):
    """The keyword options every storage's ``new_*`` calls take; all optional.

    - ``visibility_timeout``: seconds a taken job stays leased unless the lease is extended;
      then it can be taken again (default 30, at most 7 days);
    - ``dead_letter_limit`` and ``dead_letter_max_age``: dead letters kept per queue and their
      longest age in seconds (defaults 10,000 and 7 days);
    - ``keep_results``: seconds the record of an ended job is kept (default 0: no records; at
      most 100 years); ``keep_results_limit``: ended records kept per queue, the oldest beyond
      it dropped (default 10,000);
    - ``max_payload``: the largest job stored, in bytes (default 4 MiB; 0: no limit): a larger
      one raises ``ValueError`` naming its size and the limit, and nothing is stored;
    - ``rate_limit``: ``"100/s"``, ``"6000/m"``, ``"1/h"`` or ``(count, seconds)``: across
      every consumer, at most that many jobs start in any window of that length (default
      ``None``: no limit). Enforced in the take: a held-back job is not leased.
    """

    visibility_timeout: float
    dead_letter_limit: int
    dead_letter_max_age: float
    keep_results: float
    keep_results_limit: int
    max_payload: int
    rate_limit: str | tuple[int, float] | None


@dataclass(frozen=True)
class QueueSettings:
    """The options of one queue object, checked; the defaults are written here only."""

    visibility_timeout: float = DEFAULT_VISIBILITY_TIMEOUT
    dead_letter_limit: int = DEFAULT_DEAD_LETTER_LIMIT
    dead_letter_max_age: float = DEFAULT_DEAD_LETTER_MAX_AGE
    keep_results: float = DEFAULT_KEEP_RESULTS
    keep_results_limit: int = DEFAULT_KEEP_RESULTS_LIMIT
    max_payload: int = DEFAULT_MAX_PAYLOAD
    #: ``(count, seconds)``: at most ``count`` jobs of the queue start in any window of
    #: ``seconds``, across every consumer (:func:`rate_limit`); ``None``: no limit.
    rate_limit: tuple[int, float] | None = None


S = TypeVar("S", bound=QueueSettings)


def check(subject: str, key: str, value: Any, rules: Mapping[str, Rule] = RULES) -> Any:
    """Return ``value`` if it obeys the rule ``key``; raise ``TypeError``/``ValueError``."""
    rule = rules[key]
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


@overload
def queue_settings(subject: str, options: Mapping[str, Any]) -> QueueSettings: ...


@overload
def queue_settings(
    subject: str, options: Mapping[str, Any], settings: type[S], rules: Mapping[str, Rule]
) -> S: ...


def queue_settings(
    subject: str,
    options: Mapping[str, Any],
    settings: type[QueueSettings] = QueueSettings,
    rules: Mapping[str, Rule] = RULES,
) -> QueueSettings:
    """Check the keyword options of an opener and fill in the defaults: ``settings`` (a
    :class:`QueueSettings`, or an adapter's subclass) made of ``options``, each option with a
    rule checked by it. An option that is not a field of ``settings`` raises ``TypeError``."""
    known = tuple(option.name for option in fields(settings))
    checked = dict(options)
    for key, value in options.items():
        if key not in known:
            raise TypeError(
                f"{subject}: unknown option {key}={value!r}; expected {', '.join(known)}"
            )
        if key in rules:
            check(subject, key, value, rules)
        elif key in NORMAL_FORMS:
            checked[key] = NORMAL_FORMS[key](subject, value)
    return settings(**checked)


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_RATE_EXPECTED = (
    'expected "<count>/<unit>" (unit s, m, h or d; e.g. "100/s"), or (count, seconds) with '
    "count an int >= 1 and seconds > 0, <= 7 days"
)


def rate_limit(subject: str, value: Any) -> tuple[int, float] | None:
    """The option ``rate_limit`` as ``(count, seconds)``; ``None`` for ``None``.

    ``"100/s"``, ``"6000/m"``, ``"1/h"``, ``"10/d"`` or ``"5/2.5s"`` (a count per number of
    units), or a ``(count, seconds)`` pair (a stored value's list too). ``TypeError`` or
    ``ValueError`` naming the value otherwise."""
    if value is None:
        return None
    problem = f"{subject}: rate_limit={value!r}; {_RATE_EXPECTED}"
    if isinstance(value, str):
        count_text, slash, per = value.strip().partition("/")
        unit = per[-1:].lower()
        if not slash or unit not in _UNITS:
            raise ValueError(problem)
        try:
            count = int(count_text)
            seconds = (float(per[:-1]) if per[:-1].strip() else 1.0) * _UNITS[unit]
        except ValueError:
            raise ValueError(problem) from None
    elif isinstance(value, tuple | list) and len(value) == 2:
        count, seconds = value
        if isinstance(count, bool) or not isinstance(count, int):
            raise TypeError(problem)
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise TypeError(problem)
    else:
        raise TypeError(problem)
    if not (
        1 <= count <= MAX_COUNT and math.isfinite(seconds) and 0 < seconds <= MAX_VISIBILITY_TIMEOUT
    ):
        raise ValueError(problem)
    return count, float(seconds)


NORMAL_FORMS: Mapping[str, Any] = {"rate_limit": rate_limit}
"""Options whose value is not one number: checked and put in one form by these functions
(``(subject, value) -> normal form``), the form stored with the queue and compared."""


def check_name(store: str, name: Any) -> str:
    """Return ``name`` if it is a queue name: a ``str`` of 1 to 200 bytes of UTF-8."""
    expected = f"expected a str of 1 to {MAX_QUEUE_NAME_BYTES} bytes in UTF-8"
    if not isinstance(name, str):
        raise TypeError(f"{store}: queue name {name!r}; {expected}")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        size = -1  # a lone surrogate: not text any storage can keep
    if not 0 < size <= MAX_QUEUE_NAME_BYTES:
        shown = repr(name) if len(name) <= 40 else f"{name[:40]!r}... ({len(name)} characters)"
        raise ValueError(f"{store}: queue name {shown}; {expected}")
    return name


def as_bytes(subject: str, item: Any, what: str = "item") -> bytes:
    """``item`` as the bytes to store: bytes-like as is, ``str`` as UTF-8.

    ``what`` names the argument in messages (``"item"``, ``"result"``, ``"error"``).
    """
    if isinstance(item, bytes):
        return item
    if isinstance(item, (bytearray, memoryview)):
        return bytes(item)
    if isinstance(item, str):
        try:
            return item.encode("utf-8")
        except UnicodeEncodeError as exc:
            problem = f"{subject}: {what} is a str that UTF-8 cannot encode ({exc})"
            raise ValueError(problem) from None
    raise TypeError(f"{subject}: {what} of type {type(item).__name__}; expected bytes or str")


def payload(subject: str, item: Any, limit: int) -> bytes:
    """``item`` as the bytes to store (:func:`as_bytes`), at most ``limit`` of them (0: any)."""
    data = as_bytes(subject, item)
    if limit and len(data) > limit:
        raise ValueError(
            f"{subject}: a job of {len(data):,} bytes; max_payload is {limit:,} bytes (store "
            "large data elsewhere and add its key, or open the queue with a larger max_payload)"
        )
    return data


def check_job_id(subject: str, job_id: Any) -> str:
    """Return ``job_id`` if it is a job id: a non-empty ``str`` that UTF-8 can encode, of at
    most :data:`~varmq.contract.protocols.MAX_JOB_ID_BYTES` bytes."""
    problem = f"{subject}: job_id={job_id!r}; expected a non-empty str"
    if not isinstance(job_id, str):
        raise TypeError(problem)
    try:
        size = len(job_id.encode("utf-8"))
    except UnicodeEncodeError:
        size = 0  # a lone surrogate: not text any storage can keep
    if not size:
        raise ValueError(problem)
    if size > MAX_JOB_ID_BYTES:
        raise ValueError(
            f"{subject}: a job_id of {size:,} bytes; at most {MAX_JOB_ID_BYTES:,} bytes of UTF-8"
        )
    return job_id


def occurrence_mark(subject: str, schedule: Any, occurrence: Any) -> tuple[str, int]:
    """The checked ``(schedule, occurrence in whole ms)`` of ``enqueue_occurrence``."""
    if not isinstance(schedule, str):
        raise TypeError(f"{subject}: schedule={schedule!r}; expected a non-empty str")
    if not schedule:
        raise ValueError(f"{subject}: schedule={schedule!r}; expected a non-empty str")
    problem = f"{subject}: occurrence={occurrence!r}; expected Unix seconds (a finite number)"
    if isinstance(occurrence, bool) or not isinstance(occurrence, int | float):
        raise TypeError(problem)
    if not math.isfinite(occurrence) or abs(occurrence) > MAX_DELAY * 2:
        raise ValueError(problem)
    return schedule, round(occurrence * 1000)


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
