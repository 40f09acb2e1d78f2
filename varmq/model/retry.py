"""What happens after a run: its :class:`Outcome`, the retry policy that decides it for a failed
run, the not-retryable marker, and what a dead letter looks like to users.

Every bound queue settles a finished run the same way: a returned function is ``OK``; a raise is
decided here (:func:`after_failure`) as ``FAILED``, ``RETRIED`` after a delay, or ``DEAD``; the
queue's own kind then applies it (acknowledge, hand back, dead-letter) in
:meth:`~varmq.sources.base.Source.settle`.
"""

from __future__ import annotations

import contextlib
import math
import random
import sys
import traceback
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from .errors import JobCancelledError, ResultNotJSONError

__all__ = [
    "DeadLetter",
    "NoRetry",
    "Outcome",
    "Retry",
    "after_failure",
    "attach_policy",
    "failure_text",
    "retry_from_json",
    "retry_to_json",
]

# Longest error text a dead letter keeps; longer tracebacks keep their start and their end.
_TEXT_LIMIT = 16_384
_MESSAGE_LIMIT = 1_000


class Outcome(IntEnum):
    """How one run of a job ended, for the bound queue and the counters."""

    OK = 0
    """The function returned."""
    FAILED = 1
    """It raised, and that is final (no retry policy, or a queue that cannot retry)."""
    RETRIED = 2
    """It raised and was handed back for another attempt after a delay."""
    DEAD = 3
    """It raised and was moved to its queue's dead letters."""


class NoRetry(Exception):
    """Raise this (``raise varmq.NoRetry("bad input") from exc``) to fail a job for good.

    With a retry policy, the job goes straight to its queue's dead letters.
    """


@dataclass(frozen=True)
class Retry:
    """How a worker retries jobs whose function raised.

    The n-th retry waits ``backoff * multiplier ** (n - 1)`` seconds, at most ``max_delay``;
    with ``jitter`` the wait is drawn uniformly from its upper half, so jobs that failed
    together do not all come back at once. After ``max_attempts`` runs (the first included)
    the job goes to its queue's dead letters, and so does a job whose exception is an instance
    of ``non_retryable`` or of :class:`NoRetry` (or a :class:`~varmq.ResultNotJSONError`).
    """

    max_attempts: int = 5
    backoff: float = 1.0
    multiplier: float = 2.0
    max_delay: float = 300.0
    jitter: bool = True
    non_retryable: tuple[type[BaseException], ...] = field(default=())

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"Retry.max_attempts must be >= 1, got {self.max_attempts}")
        if self.backoff < 0 or self.max_delay < 0 or self.multiplier < 1:
            raise ValueError(
                "Retry needs backoff >= 0, max_delay >= 0 and multiplier >= 1, got "
                f"backoff={self.backoff}, max_delay={self.max_delay}, "
                f"multiplier={self.multiplier}"
            )

    def should_retry(self, error: BaseException, attempt: int) -> bool:
        """Whether a job that raised ``error`` on run number ``attempt`` runs again."""
        if attempt >= self.max_attempts:
            return False
        if isinstance(error, NoRetry | ResultNotJSONError) or not isinstance(error, Exception):
            return False
        return not (self.non_retryable and isinstance(error, self.non_retryable))

    def delay(self, attempt: int) -> float:
        """Seconds to wait before run ``attempt + 1``, after run ``attempt`` failed."""
        wait = min(self.backoff * self.multiplier ** max(attempt - 1, 0), self.max_delay)
        if self.jitter:
            wait = random.uniform(wait / 2, wait)
        return wait


def retry_to_json(policy: Retry) -> dict[str, Any]:
    """``policy`` as plain JSON values; ``non_retryable`` as ``"module:QualifiedName"`` names.

    Raises ``ValueError`` for what JSON cannot hold (an infinite delay) or a name cannot find
    again (a class defined inside a function).
    """
    numbers = {
        "backoff": policy.backoff,
        "multiplier": policy.multiplier,
        "max_delay": policy.max_delay,
    }
    for name, value in numbers.items():
        if not math.isfinite(value):
            raise ValueError(f"{name}={value!r} is not a number JSON can hold")
    names = []
    for cls in policy.non_retryable:
        name = f"{cls.__module__}:{cls.__qualname__}"
        if _exception_class(name) is not cls:
            raise ValueError(f"non-retryable {cls.__qualname__} cannot be found by its name")
        names.append(name)
    return {
        "max_attempts": policy.max_attempts,
        **numbers,
        "jitter": policy.jitter,
        "non_retryable": names,
    }


def retry_from_json(obj: Any) -> Retry:
    """The policy :func:`retry_to_json` gave ``obj`` for; ``ValueError`` saying what is wrong.

    A non-retryable class is looked up in the modules already imported: nothing is imported
    (JSON never makes code run), so import the module that defines it first.
    """
    if type(obj) is not dict:
        raise ValueError(f"{obj!r} is not an object")
    numbers: dict[str, Any] = {}
    for name in ("max_attempts", "backoff", "multiplier", "max_delay"):
        value: Any = obj.get(name)
        if type(value) not in (int, float) or not math.isfinite(value):
            raise ValueError(f"{name} is {value!r}, not a number")
        numbers[name] = value
    if type(numbers["max_attempts"]) is not int:
        raise ValueError(f"max_attempts is {numbers['max_attempts']!r}, not a whole number")
    jitter = obj.get("jitter")
    if type(jitter) is not bool:
        raise ValueError(f"jitter is {jitter!r}, not true or false")
    names = obj.get("non_retryable", [])
    if type(names) is not list or not all(type(name) is str for name in names):
        raise ValueError(f"non_retryable is {names!r}, not a list of names")
    classes = []
    for name in names:
        cls = _exception_class(name)
        if cls is None:
            module = name.partition(":")[0]
            raise ValueError(f"non-retryable {name!r} is not loaded: import {module} first")
        classes.append(cls)
    return Retry(**numbers, jitter=jitter, non_retryable=tuple(classes))


def _exception_class(name: str) -> type[BaseException] | None:
    """The exception class ``"module:QualifiedName"`` in a module already imported, else
    ``None``."""
    module_name, _, qualname = name.partition(":")
    found: Any = sys.modules.get(module_name)
    for part in qualname.split(".") if qualname else ():
        found = getattr(found, part, None)
    if isinstance(found, type) and issubclass(found, BaseException):
        return found
    return None


# The attribute an error carries its own policy in: one worker runs many tasks, each with its
# retry policy, and the error is what travels from the task's run to the queue's settle.
_OWN_POLICY = "__varmq_retry__"


def attach_policy(error: BaseException, policy: Retry) -> None:
    """Have ``policy`` decide what follows ``error`` in place of its queue's policy (a task's
    own ``retry=``); a queue without a policy still fails the job for good."""
    # An exception class with __slots__ takes no attribute: its queue's policy applies.
    with contextlib.suppress(AttributeError, TypeError):
        setattr(error, _OWN_POLICY, policy)


def after_failure(
    policy: Retry | None, error: BaseException, attempt: int
) -> tuple[Outcome, float]:
    """The outcome of run number ``attempt`` that raised ``error``, and the delay before the
    next attempt when it is ``RETRIED``.

    A job cancelled while it ran (:class:`~varmq.JobCancelledError`) is ``FAILED`` whatever the
    policy: neither retried nor moved to the dead letters. A policy attached to ``error``
    (:func:`attach_policy`) decides in place of ``policy``.
    """
    if policy is None or isinstance(error, JobCancelledError):
        return Outcome.FAILED, 0.0
    own = getattr(error, _OWN_POLICY, None)
    if isinstance(own, Retry):
        policy = own
    if policy.should_retry(error, attempt):
        return Outcome.RETRIED, policy.delay(attempt)
    return Outcome.DEAD, 0.0


def failure_text(error: BaseException) -> str:
    """What a dead letter records of ``error``: ``"Type: message"``, then the traceback, at
    most 16 KiB (the middle of a longer one is cut out and the cut is marked)."""
    message = str(error)
    if len(message) > _MESSAGE_LIMIT:
        message = f"{message[:_MESSAGE_LIMIT]}... [{len(message) - _MESSAGE_LIMIT} characters cut]"
    head = f"{type(error).__name__}: {message}"
    if error.__traceback__ is None:
        return head
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    if len(text) > _TEXT_LIMIT:  # a long message repeated in it: the frames with the short head
        frames = "".join(traceback.format_tb(error.__traceback__))
        text = f"Traceback (most recent call last):\n{frames}{head}\n"
    text = f"{head}\n\n{text}"
    if len(text) <= _TEXT_LIMIT:
        return text
    keep = _TEXT_LIMIT // 2
    cut = len(text) - 2 * keep
    return f"{text[:keep]}\n... [{cut} characters cut] ...\n{text[-keep:]}"


@dataclass(frozen=True)
class DeadLetter:
    """A job that will not be retried, as a queue handle's ``dead_letters()`` lists it.

    ``error`` starts with ``"Type: message"``; after a blank line comes the traceback, when the
    job's function raised (see :func:`failure_text`).
    """

    key: str
    id: str
    data: Any
    attempts: int
    error: str
    dead_at: float
