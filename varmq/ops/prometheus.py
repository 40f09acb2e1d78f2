"""Prometheus metrics for varmq workers and queues (extra ``prometheus``: prometheus-client).

The only varmq module that imports ``prometheus_client``. :class:`VarmqCollector` reads the
workers and queues on each scrape (no background thread, nothing to update by hand) and
exposes two kinds of series:

- per-process series, labelled ``worker``: job counters (``varmq_jobs_*_total``, one per
  counter of :class:`varmq.Metrics`), the job duration histogram, worker gauges, and per
  queue the age of its oldest running job. They count what this process did; every process
  exports its own, and Prometheus tells them apart by the ``instance`` it scraped (or by the
  ``process`` label, see below);
- storage-side queue gauges, labelled ``queue`` (``varmq_queue_*``): read from the storage's
  ``stats()``, so they describe the queue as every process sees it. Each queue is reported
  once per process however many workers bind it; across processes, aggregate them with
  ``max by (queue)`` and never ``sum``, or export them from one process only.
  ``varmq_queue_storage_up`` is 1 when the storage answered and 0 when it did not; the count
  gauges of a queue whose storage did not answer are left out of the scrape, never 0.

Workers and queues are read through :mod:`varmq.ops`, as the REST API and the CLI read them.

See ``docs/operations.md`` for the metric table and prometheus-client's multiprocess mode.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from ..model.states import Status
from ..tasks.app import all_apps
from .view import (
    COUNTERS,
    AnyWorker,
    QueueRow,
    StoreView,
    WorkerSource,
    bound_queues,
    find_workers,
    stats_row,
)

__all__ = ["VarmqCollector"]

log = logging.getLogger("varmq.prometheus")

_COUNTER_HELP = {
    "submitted": "Jobs this process added through the worker's handles",
    "completed": "Jobs that ran and were closed or acknowledged",
    "successful": "Job functions that returned",
    "failed": "Job functions that raised (timeouts included)",
    "retried": "Failed runs handed back for another attempt",
    "dead_lettered": "Jobs moved to their queue's dead letters",
    "lost": "Jobs taken from storage whose lease ran out before they could start",
    "timed_out": "Runs that passed their timeout",
    "released": "Jobs taken from storage but not started, handed back when the worker stopped",
    "unacknowledged": "Settles of taken jobs the storage refused or failed: those jobs run again",
}
# (metric name, worker property, help)
_WORKER_GAUGES = (
    ("varmq_jobs_processing", "num_processing", "Jobs running now in this process"),
    ("varmq_jobs_pending", "num_pending", "Jobs waiting in the worker's bound queues"),
    ("varmq_worker_concurrency", "num_concurrency", "The worker's concurrency limit"),
    ("varmq_worker_idle_threads", "num_idle_workers", "Idle threads (async: free slots)"),
)
# Status.UNKNOWN is never a worker's status: no series for it.
_STATUSES = tuple(s for s in Status if s is not Status.UNKNOWN)
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


_RATE_GAUGES = (
    (
        "varmq_queue_rate_window_used",
        "rate_window_used",
        "Jobs started in the current window of the queue's rate_limit, across every consumer",
    ),
    (
        "varmq_queue_throttled",
        "throttled",
        "1 while the queue's rate_limit window is full and jobs wait on it, else 0",
    ),
)


class VarmqCollector(Collector):
    """Collects worker counters, durations and gauges and storage-side queue gauges on each
    scrape.

    ``workers``: a mapping of name to worker, or an iterable of workers; default: every named
    worker (:func:`varmq.workers`), looked up on each scrape. The collector turns on the
    duration measurement of each worker it collects (``metrics.observe_durations``, with
    ``duration_buckets``, upper bounds in seconds; default
    :data:`varmq.model.metrics.DEFAULT_DURATION_BUCKETS`). ``queues``: where the queue gauges come
    from: a mapping of name to storage queue (anything with ``stats()``), an iterable of
    storage queues (named by their ``name``), or an adapter's ``Queues`` object (every queue it
    lists); default: the queues the workers bind (``queue_stats()``). ``registry``: registered
    there at once (default: the global one; ``None`` to register yourself). ``process``: a
    value for a ``process`` label on the per-process series, for setups that must tell
    processes apart in the series themselves; the storage-side queue gauges never carry it.
    """

    def __init__(
        self,
        workers: WorkerSource = None,
        queues: Any = None,
        *,
        registry: CollectorRegistry | None = REGISTRY,
        process: str | None = None,
        duration_buckets: Sequence[float] | None = None,
    ) -> None:
        self._workers = workers
        self._queues = queues
        self._process = process
        self._buckets = None if duration_buckets is None else tuple(duration_buckets)
        is_store = hasattr(queues, "list_queues") and hasattr(queues, "open_queue")
        self._view = StoreView(queues) if is_store else None
        # Guards _failing: the queues (and listings) that already got their warning; scrapes
        # may overlap.
        self._lock = threading.Lock()
        self._failing: set[str] = set()
        self._observe(find_workers(workers))  # so that the first scrape has durations already
        if registry is not None:
            registry.register(self)

    def describe(self) -> Iterable[Metric]:
        # Collected lazily: describing must not query workers or storage at registration.
        return []

    def collect(self) -> Iterator[Metric]:
        workers = find_workers(self._workers)
        self._observe(workers)
        labels = ["worker"] + (["process"] if self._process is not None else [])
        extra = [self._process] if self._process is not None else []
        for attribute in COUNTERS:
            counter = CounterMetricFamily(
                f"varmq_jobs_{attribute}", _COUNTER_HELP[attribute], labels=labels
            )
            for worker_name, worker in workers.items():
                counter.add_metric([worker_name, *extra], getattr(worker.metrics, attribute))
            yield counter
        yield self._durations(workers, labels, extra)
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
            for value in _STATUSES:
                status.add_metric([worker_name, *extra, value.value], float(value is current))
        yield status
        yield from self._task_metrics(extra)
        yield from self._queue_metrics(self._queue_rows(workers), extra)

    # -- parts ------------------------------------------------------------------------------

    def _task_metrics(self, extra: list[str]) -> Iterator[Metric]:
        """Runs per task name of every varmq.App of this process (its workers' runs)."""
        labels = ["task"] + (["process"] if self._process is not None else [])
        runs = CounterMetricFamily(
            "varmq_task_runs",
            "Task runs in this process that ended, by task name and outcome",
            labels=[*labels, "outcome"],
        )
        seconds = CounterMetricFamily(
            "varmq_task_seconds", "Seconds task runs took in this process", labels=labels
        )
        totals: dict[str, list[float]] = {}
        for app in all_apps():
            for name, (succeeded, failed, spent) in app.counts.snapshot().items():
                total = totals.setdefault(name, [0.0, 0.0, 0.0])
                total[0] += succeeded
                total[1] += failed
                total[2] += spent
        for name, total in sorted(totals.items()):
            runs.add_metric([name, *extra, "succeeded"], total[0])
            runs.add_metric([name, *extra, "failed"], total[1])
            seconds.add_metric([name, *extra], total[2])
        yield runs
        yield seconds

    def _observe(self, workers: Mapping[str, AnyWorker]) -> None:
        for worker in workers.values():
            worker.metrics.observe_durations(self._buckets)

    @staticmethod
    def _durations(workers: Mapping[str, AnyWorker], labels: list[str], extra: list[str]) -> Metric:
        family = HistogramMetricFamily(
            "varmq_job_duration_seconds",
            "How long job functions ran, in seconds (measured in this process)",
            labels=labels,
        )
        for worker_name, worker in workers.items():
            histogram = worker.metrics.duration_histogram()
            if histogram is None:
                continue
            buckets, total = [], 0
            for bound, count in zip(histogram.bounds, histogram.counts, strict=False):
                total += count
                buckets.append((repr(float(bound)), float(total)))  # the le label, as Go prints it
            buckets.append(("+Inf", float(histogram.count)))
            family.add_metric([worker_name, *extra], buckets, histogram.sum)
        return family

    def _queue_metrics(self, rows: list[QueueRow], extra: list[str]) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "varmq_queue_storage_up",
            "1 when the queue's storage answered this scrape, 0 when it did not",
            labels=["queue"],
        )
        for row in rows:
            up.add_metric([row["name"]], 1.0 if row["reachable"] else 0.0)
        yield up
        answered = [row for row in rows if row["reachable"]]
        for name, key, text in _QUEUE_GAUGES:
            gauge = GaugeMetricFamily(name, text, labels=["queue"])
            for row in answered:
                gauge.add_metric([row["name"]], float(row[key]))
            yield gauge
        # Queues with a rate_limit only (a series per limited queue).
        for name, key, text in _RATE_GAUGES:
            gauge = GaugeMetricFamily(name, text, labels=["queue"])
            for row in answered:
                if key in row:
                    gauge.add_metric([row["name"]], float(row[key]))
            yield gauge
        running = GaugeMetricFamily(
            "varmq_queue_oldest_running_age_seconds",
            "Seconds the oldest job running in this process from the queue has run (0: none)",
            labels=["queue"] + (["process"] if extra else []),
        )
        for row in rows:
            if "oldest_running_age" in row:
                running.add_metric([row["name"], *extra], float(row["oldest_running_age"]))
        yield running

    def _queue_rows(self, workers: Mapping[str, AnyWorker]) -> list[QueueRow]:
        """One row per queue name (the first, when names repeat), warned about when its storage
        stops answering."""
        if self._queues is None:
            rows = self._guarded("the workers' queue_stats", lambda: bound_queues(workers))
        elif self._view is not None:
            rows = self._view.rows()
            self._warn("list_queues", self._view.error)
        elif isinstance(self._queues, Mapping):
            rows = [stats_row(str(n), q) for n, q in self._queues.items()]
        else:
            rows = [stats_row(str(getattr(q, "name", f"queue@{id(q):x}")), q) for q in self._queues]
        by_name: dict[str, QueueRow] = {}
        for row in rows:
            by_name.setdefault(str(row["name"]), row)
        for name, row in by_name.items():
            self._warn(f"queue {name!r}", None if row["reachable"] else row["error"])
        return list(by_name.values())

    def _guarded(self, what: str, call: Any) -> list[QueueRow]:
        try:
            rows: list[QueueRow] = call()
        except Exception as exc:
            self._warn(what, f"{type(exc).__name__}: {exc}")
            return []
        self._warn(what, None)
        return rows

    def _warn(self, what: str, error: str | None) -> None:
        """Warn once when ``what`` starts failing (``error``), and note when it is back."""
        with self._lock:
            first = error is not None and what not in self._failing
            if error is None:
                self._failing.discard(what)
            else:
                self._failing.add(what)
        if first:
            log.warning(
                "varmq.prometheus: %s failed (%s); its storage gauges are left out of the "
                "scrape and varmq_queue_storage_up is 0",
                what,
                error,
            )
