"""Job functions that run the callable submitted as the job's data (in-memory queues only)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ..model.jobs import Job

__all__ = ["err_func", "func", "result_func"]

R = TypeVar("R")

_NO_CALLABLE = (
    "varmq: the job's data is None; a worker made without a function runs the callable each "
    "job carries"
)


def func() -> Callable[[Job[Callable[[], Any]]], None]:
    """A job function for ``new_worker`` that calls ``job.data()``."""

    def run(job: Job[Callable[[], Any]]) -> None:
        if job.data is None:
            raise ValueError(_NO_CALLABLE)
        job.data()

    return run


def err_func() -> Callable[[Job[Callable[[], Any]]], None]:
    """A job function for ``new_err_worker`` that calls ``job.data()``; its raise is the error."""
    return func()


def result_func() -> Callable[[Job[Callable[[], R]]], R]:
    """A job function for ``new_result_worker`` that returns ``job.data()``."""

    def run(job: Job[Callable[[], R]]) -> R:
        if job.data is None:
            raise ValueError(_NO_CALLABLE)
        return job.data()

    return run
