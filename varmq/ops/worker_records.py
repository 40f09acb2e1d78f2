"""Workers of every process, as the stores of the served workers' queues record them.

REST ``GET /workers`` lists the workers it serves (:func:`varmq.ops.view.worker_summary`), then
:func:`other_workers`: the record (:class:`varmq.WorkerInfo`, as a dict) of every other worker,
of any process, that the stores of those workers' storage queues keep (``store.workers()``
seen from here, without opening the stores again). ``varmq workers URL`` reads one store's
``workers()`` and prints :func:`worker_rows` as a table. Reads only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ..contract.protocols import IHasWorkerRegistry, IWorkerRegistry
from ..contract.workers import WorkerInfo, worker_infos

__all__ = ["other_workers", "worker_rows"]

log = logging.getLogger("varmq.rest")


def _registries(workers: Mapping[str, Any]) -> list[IWorkerRegistry]:
    """The worker registries of the stores the workers' storage queues are in, each once.

    Reaches past the workers to their sources as :func:`varmq.ops.view.sources` does (not
    imported: it would make the chain of imports of ``varmq.rest`` one module too deep)."""
    found: dict[int, IWorkerRegistry] = {}
    for worker in workers.values():
        for source in list(worker._dispatch.sources):
            storage = getattr(source, "storage", None)
            if not isinstance(storage, IHasWorkerRegistry):
                continue
            registry = storage.worker_registry
            if isinstance(registry, IWorkerRegistry):
                found.setdefault(id(registry), registry)
    return list(found.values())


def other_workers(workers: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The records of every worker but ``workers`` in the stores of their storage queues,
    living ones first (``WorkerInfo.as_dict()``); a store that cannot answer is left out."""
    served = {worker._worker_records.id for worker in workers.values()}
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for registry in _registries(workers):
        try:
            infos = worker_infos(registry.worker_records())
        except Exception as exc:
            log.debug("varmq: reading worker records failed: %s: %s", type(exc).__name__, exc)
            continue
        for info in infos:
            if info.id not in served and info.id not in seen:
                seen.add(info.id)
                rows.append(info.as_dict())
    return rows


def worker_rows(infos: Iterable[WorkerInfo], now: float | None = None) -> list[tuple[str, ...]]:
    """The table ``varmq workers`` prints: one row per worker (see :data:`HEADER`)."""
    now = time.time() if now is None else now
    return [
        (
            info.id[:12],
            info.name or "-",
            info.host,
            str(info.pid),
            ",".join(info.queues),
            str(info.concurrency),
            str(info.running),
            str(info.completed),
            str(info.failed),
            f"{max(now - info.last_seen, 0.0):.0f}s ago",
            "alive" if info.alive else "gone",
        )
        for info in infos
    ]


HEADER = (
    "ID",
    "NAME",
    "HOST",
    "PID",
    "QUEUES",
    "CONCURRENCY",
    "RUNNING",
    "COMPLETED",
    "FAILED",
    "LAST_SEEN",
    "STATE",
)
"""The columns of :func:`worker_rows`."""
