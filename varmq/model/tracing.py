"""Observed runs of a job (:mod:`varmq.contract.observe`): the attempt kept on the job, so that
whoever settles the run (the runner after a return, the timer at a timeout or cancel) ends it;
and what observers read of a job (:func:`task_of`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..contract.observe import Attempt, Observer
    from .jobs import Job
    from .retry import Outcome

__all__ = ["begin_attempt", "end_attempt", "task_of"]


def begin_attempt(observer: Observer, destination: str, job: Job[Any]) -> Attempt | None:
    """Start observing a run of ``job`` (in the thread or task that runs it), kept on the job
    so that whoever settles the run ends it (:func:`end_attempt`)."""
    extra = job._extra
    attempt = observer.process(destination, job, None if extra is None else extra.trace)
    if attempt is not None:
        job._more().attempt = attempt
    return attempt


def end_attempt(job: Job[Any], error: BaseException | None, outcome: Outcome | None) -> None:
    """End the observed run of ``job`` (where it was settled); nothing if it is not observed.

    The runner and the timer never both settle one run (the timer's ``unwatch``/``untrack``
    decides), so the attempt is taken off the job by exactly one of them."""
    extra = job._extra
    if extra is None:
        return
    attempt = extra.attempt
    if attempt is not None:
        extra.attempt = None
        attempt.end(error, outcome)


def task_of(data: Any) -> str | None:
    """The name of the task a job's ``data`` calls (``{"task": name, ...}``), if it is one."""
    if type(data) is dict:
        name = data.get("task")
        if isinstance(name, str):
            return name
    return None
