"""The keyword options of the worker factories, as one typed dictionary.

``new_worker(fn, 4, **options)`` and its siblings take exactly these keywords, so a type checker
rejects a misspelt one (``retyr=3``). They mirror the keyword-only parameters of
:class:`varmq.BaseWorker`; a test keeps the two in step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict

from .retry import Retry
from .strategies import Strategy

if TYPE_CHECKING:
    from .worker import BaseWorker

__all__ = ["ErrorHandler", "WorkerOptions"]

ErrorHandler = Callable[["BaseWorker[Any, Any, Any]", BaseException], None]
"""``error_handler(worker, exc)``: called with every error the worker reports."""


class WorkerOptions(TypedDict, total=False):
    """Every keyword option of ``new_worker``, ``new_err_worker`` and ``new_result_worker``.

    See ``docs/workers.md`` for what each does and its default.
    """

    name: str | None
    auto_run: bool
    strategy: Strategy
    job_id_generator: Callable[[], str] | None
    error_handler: ErrorHandler | None
    idle_worker_expiry: float
    min_idle_worker_ratio: int
    poll_interval: float
    payload_decoder: Callable[[Any], Any] | None
    payload_encoder: Callable[[Any], Any] | None
    max_errors: int
    stopped_retention: float
    retry: Retry | None
    poison_limit: int
    prefetch: int | None
