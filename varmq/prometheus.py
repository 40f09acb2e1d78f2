"""Prometheus metrics for varmq workers and queues (extra ``prometheus``: prometheus-client).

The only varmq module that imports ``prometheus_client``. :class:`VarmqCollector` reads the
workers and queues on each scrape (no background thread, nothing to update by hand) and
exposes two kinds of series:

- per-process series, labelled ``worker``: job counters (``varmq_jobs_*_total``) and worker
  gauges. They count what this process did; every process exports its own, and Prometheus
  tells them apart by the ``instance`` it scraped (or by the ``process`` label, see below);
- storage-side queue gauges, labelled ``queue`` (``varmq_queue_*``): read from the storage's
  ``stats()``, so they describe the queue as every process sees it. Each queue is reported
  once per process however many workers bind it; across processes, aggregate them with
  ``max by (queue)`` and never ``sum``, or export them from one process only.

See ``docs/operations.md`` for the metric table and prometheus-client's multiprocess mode.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .registry import workers as registered_workers
from .states import Status
from .worker import BaseWorker

__all__ = ["VarmqCollector"]

log = logging.getLogger("varmq.prometheus")

# (metric name without _total, Metrics attribute, help)
_COUNTERS = (
    ("varmq_jobs_submitted", "submitted", "Jobs this process added through the worker's handles"),
    ("varmq_jobs_completed", "completed", "Jobs that ran and were closed or acknowledged"),
    ("varmq_jobs_successful", "successful", "Job functions that returned"),
    ("varmq_jobs_failed", "failed", "Job functions that raised"),
)
# (metric name, worker property, help)
_WORKER_GAUGES = (
    ("varmq_jobs_processing", "num_processing", "Jobs running now in this process"),
    ("varmq_jobs_pending", "num_pending", "Jobs waiting in the worker's bound queues"),
    ("varmq_worker_concurrency", "num_concurrency", "The worker's concurrency limit"),
    ("varmq_worker_idle_threads", "num_idle_workers", "Idle threads (async: free slots)"),
)
# (metric name, stats key, help)
_QUEUE_GAUGES = (
    ("varmq_queue_waiting", "waiting", "Jobs available to take now, in storage"),
    ("varmq_queue_in_flight", "in_flight", "Jobs leased by a consumer, in storage"),
    ("varmq_queue_delayed", "delayed", "Jobs that become available later, in storage"),
    ("varmq_queue_dead", "dead", "Dead letters kept for the queue, in storage"),
    (
        "varmq_queue_oldest_age_seconds",
        "oldest_age",
        "Seconds since the oldest waiting job became available (0 when none waits)",
    ),
)


class VarmqCollector(Collector):
    """Collects worker counters and gauges and storage-side queue gauges on each scrape.

    ``workers``: a mapping of name to worker, or an iterable of workers; default: every named
    worker (:func:`varmq.workers`), looked up on each scrape. ``queues``: where the queue
    gauges come from: a mapping of name to storage queue (anything with ``stats()``), an
    iterable of storage queues (named by their ``name``), or an adapter's ``Queues`` object
    (every queue it lists, via ``list_queues()``/``open_queue()``); default: the queues the
    workers report in ``queue_stats()``. ``registry``: registered there at once (default: the
    global one; ``None`` to register yourself). ``process``: a value for a ``process`` label
    on the per-process series, for setups that must tell processes apart in the series
    themselves; the queue gauges never carry it.
    """

    def __init__(
        self,
        workers: Mapping[str, Any] | Iterable[Any] | None = None,
        queues: Any = None,
        *,
        registry: CollectorRegistry | None = REGISTRY,
        process: str | None = None,
    ) -> None:
        self._workers = workers
        self._queues = queues
        self._process = process
        # Guards _opened (queues opened from an adapter's Queues object, by name, reused
        # across scrapes) and _failing (what already got its warning): scrapes may overlap.
        self._lock = threading.Lock()
        self._opened: dict[str, Any] = {}
        self._failing: set[str] = set()
        if registry is not None:
            registry.register(self)

    def describe(self) -> Iterable[Metric]:
        # Collected lazily: describing must not query workers or storage at registration.
        return []

    def collect(self) -> Iterator[Metric]:
        workers = self._all_workers()
        labels = ["worker"] + (["process"] if self._process is not None else [])
        extra = [self._process] if self._process is not None else []
        for name, attribute, text in _COUNTERS:
            counter = CounterMetricFamily(name, text, labels=labels)
            for worker_name, worker in workers.items():
                counter.add_metric([worker_name, *extra], getattr(worker.metrics, attribute))
            yield counter
        for name, attribute, text in _WORKER_GAUGES:
            gauge = GaugeMetricFamily(name, text, labels=labels)
            for worker_name, worker in workers.items():
                gauge.add_metric([worker_name, *extra], getattr(worker, attribute))
            yield gauge
        status = GaugeMetricFamily(
            "varmq_worker_status",
            "1 for the worker's current status, 0 for the others",
            labels=[*labels, "status"],
        )
        for worker_name, worker in workers.items():
            current = worker.status
            for value in Status:
                status.add_metric([worker_name, *extra, value.value], float(value is current))
        yield status
        queues = self._queue_stats(workers)
        for name, key, text in _QUEUE_GAUGES:
            gauge = GaugeMetricFamily(name, text, labels=["queue"])
            for queue_name, stats in queues.items():
                gauge.add_metric([queue_name], float(stats.get(key, 0)))
            yield gauge

    # -- sources ----------------------------------------------------------------------------

    def _all_workers(self) -> dict[str, BaseWorker[Any, Any, Any]]:
        source = registered_workers() if self._workers is None else self._workers
        if isinstance(source, Mapping):
            pairs = list(source.items())
        else:
            pairs = [(getattr(w, "name", "") or f"worker@{id(w):x}", w) for w in source]
        return {name: w for name, w in pairs if isinstance(w, BaseWorker)}

    def _queue_stats(self, workers: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
        """Stats by queue name: one storage query per queue, whoever binds it."""
        found: dict[str, Mapping[str, Any]] = {}
        if self._queues is None:
            for worker in workers.values():
                queue_stats = getattr(worker, "queue_stats", None)
                if callable(queue_stats):
                    for stats in self._guarded("worker queue_stats", queue_stats) or []:
                        found.setdefault(str(stats["name"]), stats)
            return found
        for name, queue in self._storage_queues():
            stats = self._guarded(name, queue.stats)
            if stats is not None:
                found[name] = stats
        return found

    def _storage_queues(self) -> list[tuple[str, Any]]:
        queues = self._queues
        if isinstance(queues, Mapping):
            return list(queues.items())
        if hasattr(queues, "list_queues") and hasattr(queues, "open_queue"):
            listed = self._guarded("list_queues", queues.list_queues) or []
            pairs = []
            for name, _kind in listed:
                with self._lock:
                    queue = self._opened.get(name)
                if queue is None:
                    queue = self._guarded(
                        f"open_queue({name!r})", lambda n=name: queues.open_queue(n)
                    )
                    if queue is None:
                        continue
                    with self._lock:
                        queue = self._opened.setdefault(name, queue)
                pairs.append((name, queue))
            return pairs
        return [(str(getattr(q, "name", f"queue@{id(q):x}")), q) for q in queues]

    def _guarded(self, what: str, call: Any) -> Any:
        """``call()``; a failure leaves that part out of this scrape, warned once."""
        try:
            result = call()
        except Exception as exc:
            with self._lock:
                first = what not in self._failing
                self._failing.add(what)
            if first:
                log.warning("varmq.prometheus: %s failed (%s); left out of the scrape", what, exc)
            return None
        with self._lock:
            self._failing.discard(what)
        return result
