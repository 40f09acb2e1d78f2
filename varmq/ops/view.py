"""The operator layer's one view of workers and queues: what REST, Prometheus and the CLI show.

:func:`find_workers` finds the workers (a mapping, an iterable, or the registry of named workers);
:func:`bound_queues` puts their ``queue_stats()`` rows together, a storage queue bound by several
workers once; :class:`StoreView` reads every queue of a store (an adapter's ``Queues``);
:func:`dead_letter_rows` turns stored dead letters into rows, decoding each envelope with
:func:`varmq.contract.envelope.decode`. A queue whose storage cannot answer is a row with
``"reachable": False``, its ``"error"`` and ``None`` counts, never zeros.

Reads only: nothing here changes a worker or a queue, prints, or imports an adapter.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from ..api.worker import BaseWorker
from ..api.worker import workers as registered_workers
from ..contract import envelope
from ..contract.protocols import IDeadLetterable

__all__ = [
    "COUNTERS",
    "COUNTS",
    "AnyWorker",
    "QueueRow",
    "StoreView",
    "UnknownQueueError",
    "WorkerSource",
    "bound_dead_letters",
    "bound_queues",
    "binds_queue",
    "bound_handle",
    "dead_letter_rows",
    "find_workers",
    "stats_row",
    "unreachable",
    "worker_metrics",
    "worker_summary",
]

AnyWorker = BaseWorker[Any, Any, Any]
WorkerSource = Mapping[str, Any] | Iterable[Any] | None
"""Where workers come from: name -> worker, workers (named by ``name``), or ``None`` for every
named worker (:func:`varmq.workers`)."""
QueueRow = dict[str, Any]
"""One queue: ``name``, ``kind``, the :data:`COUNTS`, ``reachable`` and ``error``; rows of bound
queues also have ``storage`` and ``workers`` (and ``oldest_running_age`` when observed)."""

COUNTERS = (
    "submitted",
    "completed",
    "successful",
    "failed",
    "retried",
    "dead_lettered",
    "lost",
    "timed_out",
    "released",
    "unacknowledged",
)
"""The counters of :class:`varmq.Metrics`, in the order they are shown."""
COUNTS = ("waiting", "in_flight", "delayed", "dead", "oldest_age")
"""The counts of a queue, as :class:`varmq.contract.protocols.QueueStats` names them."""
RATE_COUNTS = ("rate_window_used", "throttled")
"""What the stats of a queue with a ``rate_limit`` add (``varmq.contract.protocols.RateStats``)."""


# -- workers ----------------------------------------------------------------------------------


def find_workers(source: WorkerSource = None) -> dict[str, AnyWorker]:
    """The workers ``source`` names, by name; entries that are not workers are left out."""
    found = registered_workers() if source is None else source
    if isinstance(found, Mapping):
        pairs = list(found.items())
    else:
        pairs = [(getattr(w, "name", "") or f"worker@{id(w):x}", w) for w in found]
    return {str(name): w for name, w in pairs if isinstance(w, BaseWorker)}


def worker_summary(name: str, worker: AnyWorker) -> dict[str, Any]:
    """What a worker list shows of one worker."""
    return {
        "name": name,
        "status": worker.status.value,
        "concurrency": worker.num_concurrency,
        "num_processing": worker.num_processing,
        "num_pending": worker.num_pending,
        "num_idle_workers": worker.num_idle_workers,
    }


def worker_metrics(worker: AnyWorker) -> dict[str, int]:
    """Every counter of the worker's :class:`varmq.Metrics`."""
    metrics = worker.metrics
    return {name: int(getattr(metrics, name)) for name in COUNTERS}


# -- queues bound by workers ------------------------------------------------------------------


def bound_queues(workers: Mapping[str, AnyWorker]) -> list[QueueRow]:
    """Every queue the workers bind, in the order first seen.

    A storage queue (the same name on the same storage) bound by several workers is one row
    listing them all; its counts come from the storage, so any of them tells. In-memory queues
    belong to their worker, whatever their names. ``oldest_running_age``, a count of this
    process, is the largest any of the workers reports.
    """
    merged: dict[tuple[str, ...], QueueRow] = {}
    for worker_name, worker in workers.items():
        for stats in worker.queue_stats():
            where = str(stats.get("storage", ""))
            key = (str(stats["name"]), where, worker_name if where == "memory" else "")
            row = merged.get(key)
            if row is None:
                merged[key] = {**stats, "workers": [worker_name]}
                continue
            row["workers"].append(worker_name)
            if not row["reachable"] and stats.get("reachable"):
                row.update({k: stats[k] for k in (*COUNTS, "reachable", "error")})
            if "oldest_running_age" in stats:
                row["oldest_running_age"] = max(
                    float(row.get("oldest_running_age", 0.0)), float(stats["oldest_running_age"])
                )
    return list(merged.values())


def unreachable(rows: Iterable[QueueRow]) -> list[QueueRow]:
    """The rows whose storage could not answer."""
    return [row for row in rows if not row.get("reachable", True)]


def sources(worker: AnyWorker) -> list[Any]:
    """The sources of ``worker``'s bound queues. The worker offers no public way to them (to
    their dead letters, their storage), only their counts: this is the one place that reaches
    past it."""
    return list(worker._dispatch.sources)


def _sources(worker: AnyWorker, name: str) -> list[Any]:
    return [s for s in sources(worker) if s.label == name]


def bound_dead_letters(
    workers: Mapping[str, AnyWorker], name: str, limit: int
) -> list[dict[str, Any]] | None:
    """Up to ``limit`` dead letters, oldest first, of the bound queue ``name``; ``None`` when
    no worker binds a queue of that name. Raises when its storage cannot answer."""
    for worker in workers.values():
        for source in _sources(worker, name):
            dead = getattr(source, "dead", None)
            if dead is not None:  # an in-memory queue: its letters hold the job data itself
                return [
                    {
                        "key": d.key,
                        "id": d.id,
                        "attempts": d.attempts,
                        "error": d.error,
                        "dead_at": d.dead_at,
                        "data": d.data,
                        "item": None,
                    }
                    for d in dead.letters(limit)
                ]
            if isinstance(source.storage, IDeadLetterable):
                return dead_letter_rows(source.storage.dead_letters(limit))
            return []
    return None


def bound_handle(workers: Mapping[str, AnyWorker], name: str) -> Any | None:
    """The handle of the first queue named ``name`` among ``workers``' binds (what ``bind_*`` or
    ``with_*`` returned: ``job``, ``cancel``); ``None`` when no worker binds one."""
    for worker in workers.values():
        for handle in worker._binder.handles:
            if handle._label == name:
                return handle
    return None


def binds_queue(workers: Mapping[str, AnyWorker], name: str) -> bool:
    """Whether one of ``workers`` binds a queue named ``name`` (of any kind, a topic
    subscription too)."""
    return any(_sources(worker, name) for worker in workers.values())


# -- queues of a store ------------------------------------------------------------------------


def stats_row(name: str, queue: Any, kind: str | None = None) -> QueueRow:
    """One queue read from its storage (``queue.stats()``); a failure is an unreachable row."""
    try:
        stats = queue.stats()
    except Exception as exc:
        return _down(name, kind, f"{type(exc).__name__}: {exc}")
    counts = {k: stats[k] for k in COUNTS}
    rate = {k: stats[k] for k in RATE_COUNTS if k in stats}  # a queue with a rate_limit
    return {"name": name, "kind": kind, **counts, **rate, "reachable": True, "error": None}


def _down(name: str, kind: str | None, error: str) -> QueueRow:
    """The row of a queue whose storage could not answer: no counts, the error."""
    return {"name": name, "kind": kind, **dict.fromkeys(COUNTS), "reachable": False, "error": error}


class UnknownQueueError(LookupError):
    """A queue name the store does not have; ``known`` lists the names it has."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = known
        super().__init__(f"no queue named {name!r} (queues: {', '.join(known) or 'none'})")


class StoreView:
    """Every queue of one store (an adapter's ``Queues``), each opened once and kept.

    ``rows()`` lists the store's queues and reads each; it never raises. When the listing
    fails, :attr:`error` says why and the queues read before are given as unreachable, so an
    outage looks like one rather than like queues that went away. Thread-safe: scrapes may
    overlap.
    """

    def __init__(self, store: Any) -> None:
        self.store = store
        #: Why the last listing failed; ``None`` when it worked.
        self.error: str | None = None
        # Guards _opened (name -> (kind, queue object), reused across calls) and error.
        self._lock = threading.Lock()
        self._opened: dict[str, tuple[str, Any]] = {}

    def rows(self) -> list[QueueRow]:
        """One row per queue, by name."""
        try:
            listed = sorted((str(n), str(k)) for n, k in self.store.list_queues())
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            with self._lock:
                self.error = error
                known = sorted((n, kind) for n, (kind, _) in self._opened.items())
            return [_down(n, kind, error) for n, kind in known]
        with self._lock:
            self.error = None
        rows = []
        for name, kind in listed:
            try:
                queue = self._queue(name, kind)
            except Exception as exc:
                rows.append(_down(name, kind, f"{type(exc).__name__}: {exc}"))
                continue
            rows.append(stats_row(name, queue, kind))
        return rows

    def queue(self, name: str) -> Any:
        """The existing queue ``name``; :class:`UnknownQueueError` when the store has none."""
        known = {str(n): str(k) for n, k in self.store.list_queues()}
        if name not in known:
            raise UnknownQueueError(name, sorted(known))
        return self._queue(name, known[name])

    def _queue(self, name: str, kind: str) -> Any:
        with self._lock:
            opened = self._opened.get(name)
        if opened is not None:
            return opened[1]
        queue = self.store.open_queue(name)
        with self._lock:
            return self._opened.setdefault(name, (kind, queue))[1]


# -- dead letters -----------------------------------------------------------------------------


def dead_letter_rows(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Stored dead letters (:class:`varmq.contract.protocols.DeadLetterRecord`) as rows.

    Each row: ``key``, ``id`` (``""`` when the envelope does not decode), ``attempts``,
    ``error``, ``dead_at`` (Unix seconds), ``data`` (the job's data; ``None`` when the envelope
    does not decode) and ``item`` (the stored bytes as text).
    """
    rows = []
    for record in records:
        raw = record.get("item", b"")
        item = bytes(raw) if isinstance(raw, bytes | bytearray | memoryview) else str(raw).encode()
        try:
            job_id, data = envelope.decode(item)[:2]
        except envelope.EnvelopeError:
            job_id, data = "", None
        rows.append(
            {
                "key": str(record["key"]),
                "id": job_id,
                "attempts": int(record.get("attempts", 0)),
                "error": str(record.get("error", "")),
                "dead_at": float(record.get("dead_at", 0.0)),
                "data": data,
                "item": item.decode("utf-8", "replace"),
            }
        )
    return rows
