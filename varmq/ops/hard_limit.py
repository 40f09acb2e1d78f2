"""The hard time limit of :func:`varmq.run` (``hard_timeout``, ``varmq worker --hard-timeout``):
which workers have one, how often to look, and the function found past it.

A plain function cannot be stopped inside its thread: once its job was settled at its timeout
it runs on, holding its slot. A worker with ``hard_timeout`` lets :func:`varmq.run` end the
whole process when such a function has run that many seconds past its timeout (the ending
itself is ``varmq.ops.service``'s, which stops the workers). No lock: :class:`HardLimit` is
used by the one thread that runs :func:`varmq.run`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..api.worker import BaseWorker
from ..model import validate
from .supervisor import HARD_TIMEOUT

__all__ = ["HardLimit", "Overrun", "apply_hard_timeout"]

AnyWorker = BaseWorker[Any, Any, Any]


def apply_hard_timeout(
    workers: Sequence[AnyWorker], seconds: float | None, *, option: str = "hard_timeout"
) -> None:
    """``varmq worker --hard-timeout S``: give ``seconds`` as ``hard_timeout`` to each of
    ``workers`` that has none of its own (``None``: nothing changes). Raises ``TypeError`` or
    ``ValueError``, naming ``option``, unless ``seconds`` is a positive finite number."""
    if seconds is None:
        return
    limit = validate.seconds(option, seconds, positive=True)
    for worker in workers:
        if worker._hard_timeout is None:
            worker._hard_timeout = limit


class Overrun:
    """A plain function found running past its job's timeout (or cancel) by more than its
    worker's ``hard_timeout``."""

    def __init__(
        self,
        worker: AnyWorker,
        job_id: str,
        queue: str,
        timeout: float | None,
        seconds: float,
        limit: float,
    ) -> None:
        self.worker = worker
        self.job_id = job_id
        self.queue = queue
        self.timeout = timeout
        self.seconds = seconds
        self.limit = limit

    def line(self) -> str:
        """The one ERROR line that says why the process ends."""
        past = "its timeout" if self.timeout is not None else "its cancellation"
        job = f"job {self.job_id!r}" if self.job_id else "a job without an id"
        settled = (
            f"timeout {self.timeout:g} s; the job was failed as timed out at its timeout, "
            "retried or dead-lettered by its policy"
            if self.timeout is not None
            else "cancelled by id; the job was settled as cancelled"
        )
        return (
            f"varmq: ending this process: a job function ran {self.seconds:.2f} s past {past}, "
            f"beyond hard_timeout={self.limit:g} (worker {self.worker._label}, "
            f"{job} of queue {self.queue!r}, {settled}); the other running jobs go back to "
            f"storage where it can take them, and the process exits {HARD_TIMEOUT}"
        )


class HardLimit:
    """Watches the workers' functions running past their timeout, for ``hard_timeout``."""

    def __init__(self, workers: list[AnyWorker]) -> None:
        self._workers = [w for w in workers if w._hard_timeout is not None]
        limits = [w._hard_timeout for w in self._workers if w._hard_timeout is not None]
        # How often to look: the exit comes at most this long after the limit (and no
        # more often than 50 times a second).
        self.period: float | None = max(min(0.5, min(limits) / 5), 0.02) if limits else None
        self.overrun: Overrun | None = None

    def tripped(self) -> bool:
        """Whether a function of a worker with a ``hard_timeout`` ran past it (sticky)."""
        if self.overrun is None:
            for worker in self._workers:
                limit = worker._hard_timeout
                oldest = worker._oldest_overrun()
                if limit is not None and oldest is not None and oldest[3] > limit:
                    self.overrun = Overrun(worker, *oldest, limit)
                    break
        return self.overrun is not None
