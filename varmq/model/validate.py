"""The checks every option and argument of the core goes through where it is given.

A wrong type raises ``TypeError``, a wrong value ``ValueError``, each naming the option and the
value, so that a bad option never surfaces later inside a worker thread. No state here.
"""

from __future__ import annotations

import inspect
import os

from .strategy import Strategy

__all__ = [
    "concurrency",
    "instance",
    "job_function",
    "optional_callable",
    "seconds",
    "strategy",
    "takes_job",
    "whole",
]


def _shown(value: object) -> str:
    return f"{value!r} ({type(value).__name__})"


def whole(option: str, value: object, *, minimum: int | None = None) -> int:
    """``value`` as an int option (not a bool, not a float), at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"varmq: {option} must be an int, got {_shown(value)}")
    if minimum is not None and value < minimum:
        raise ValueError(f"varmq: {option} must be >= {minimum}, got {value!r}")
    return value


def seconds(option: str, value: object, *, positive: bool = False) -> float:
    """``value`` as a finite number of seconds, >= 0 (> 0 when ``positive``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"varmq: {option} must be a number of seconds, got {_shown(value)}")
    number = float(value)
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError(f"varmq: {option} must be a finite number of seconds, got {value!r}")
    if number < 0 or (positive and number == 0):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"varmq: {option} must be {bound} seconds, got {value!r}")
    return number


def optional_callable(option: str, value: object) -> None:
    """Refuse a ``value`` that is neither ``None`` nor callable."""
    if value is not None and not callable(value):
        raise TypeError(f"varmq: {option} must be callable or None, got {_shown(value)}")


def instance(option: str, value: object, cls: type, *, none_ok: bool = True) -> None:
    """Refuse a ``value`` that is not a ``cls`` (or ``None`` when ``none_ok``)."""
    if (value is None and none_ok) or isinstance(value, cls):
        return
    raise TypeError(f"varmq: {option} must be a {cls.__name__}, got {_shown(value)}")


def concurrency(option: str, value: object) -> int:
    """A concurrency: a positive int, or 0 for the CPU count (negatives are refused)."""
    n = whole(option, value, minimum=0)
    return n if n > 0 else (os.cpu_count() or 1)


def job_function(fn: object) -> None:
    """Refuse a job function that is not callable or cannot take the job as its argument."""
    if not callable(fn):
        raise TypeError(f"varmq: the job function must be callable, got {_shown(fn)}")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # no signature to check (some builtins): it will show when it runs
    try:
        signature.bind(None)
    except TypeError:
        raise TypeError(
            f"varmq: the job function {getattr(fn, '__qualname__', fn)!r} must take one "
            f"argument, the job; its signature is {signature}"
        ) from None


def strategy(value: object) -> Strategy:
    """A :class:`Strategy`, or the text of one."""
    try:
        return Strategy(value)
    except ValueError:
        choices = ", ".join(repr(s.value) for s in Strategy)
        raise ValueError(f"varmq: strategy must be one of {choices}, got {value!r}") from None


def takes_job(handler: object) -> bool:
    """Whether an error handler takes a third parameter (the failed job)."""
    if handler is None:
        return False
    try:
        inspect.signature(handler).bind(None, None, None)  # type: ignore[arg-type]
    except TypeError:
        return False
    except ValueError:
        return False  # no signature to look at: call it the documented two-argument way
    return True
