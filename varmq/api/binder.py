"""What a bind builds: :class:`Binder` wraps storage in a source (:mod:`varmq.sources`) with the
worker's options and adds it to the worker's dispatcher. The methods users call, which also
make the handle they get back, are :mod:`varmq.api.binding`.

Every worker kind binds storage queues; err and result workers only queues that keep job
records (``keep_results``), since that is where their outcomes go for other processes to read.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ..contract import rules
from ..contract.protocols import ICapacitySetter, IJobRecords
from ..contract.topic_names import OnFull
from ..engine.dispatch import Dispatcher
from ..model import validate
from ..model.groups import EnqueuedGroupJob
from ..model.jobs import EnqueuedJob
from ..model.retry import Retry
from ..sources.base import CancelRunning, Decode, Report, SourceSettings
from ..sources.memory import MemorySource
from ..sources.registration import WorkerRecords
from ..sources.storage import StorageSource
from ..sources.topic import TopicSource
from ..topics.topics import Topics
from .handles import JobMaker, Producer

__all__ = ["Binder"]

Q = TypeVar("Q")
H = TypeVar("H", bound=EnqueuedJob[Any])
G = TypeVar("G", bound=EnqueuedGroupJob)

# The rank of a queue bound without ``priority=``: after every ranked one, in bind order.
_LAST_RANK = sys.maxsize


class Binder(Generic[H, G]):
    """Builds the sources and handles of one worker's binds."""

    def __init__(
        self,
        *,
        dispatch: Dispatcher,
        producer: Producer,
        jobs: JobMaker[H, G],
        report: Report,
        retry: Retry | None,
        decode: Decode | None,
        poison_limit: int,
        wake_timer: Callable[[], None],
        thread_name: str,
        cancel_running: CancelRunning | None = None,
        outcomes: str = "",
        worker_records: WorkerRecords | None = None,
    ) -> None:
        self._dispatch = dispatch
        self.producer = producer
        self.jobs = jobs
        self._report = report
        self._retry = retry
        self._decode = decode
        self._poison_limit = poison_limit
        self._wake_timer = wake_timer
        self._thread_name = thread_name
        self._cancel_running = cancel_running
        # What the worker kind's handles give back ("", "errs", "results"): err and result
        # workers bind only storage that keeps records, and result workers keep their values.
        self._outcomes = outcomes
        # The worker's records in the stores of its storage queues (sources.registration).
        self._worker_records = worker_records
        #: Every handle made, in bind order (what ``worker.schedule`` uses without ``queue=``).
        self.handles: list[Any] = []

    def _settings(
        self,
        storage: Any,
        priority: int | None,
        capacity: int,
        name: str | None,
        prio: bool,
        retry: Retry | None = None,
    ) -> SourceSettings:
        """The settings of a source of ``storage`` (its capacity set, where it takes one);
        ``retry``: the queue's own policy, in place of the worker's."""
        if capacity and isinstance(storage, ICapacitySetter):
            storage.set_capacity(capacity)
        given = name or getattr(storage, "name", None)
        label = given if isinstance(given, str) and given else None
        count = len(self._dispatch.sources)
        return SourceSettings(
            label=label or f"{type(storage).__name__}#{count + 1}",
            rank=_LAST_RANK if priority is None else priority,
            index=count,
            prioritised=prio,
            report=self._report,
            retry=self._retry if retry is None else retry,
            decode=self._decode,
            poll=self._dispatch.poll_interval,
            on_delayed=self._wake_timer,
            cancel_running=self._cancel_running,
        )

    def memory(
        self,
        storage: Any,
        priority: int | None,
        capacity: int,
        name: str | None,
        prio: bool,
        retry: Retry | None,
        keep_results: float,
        rate_limit: str | tuple[int, float] | None = None,
    ) -> MemorySource:
        """Bind in-memory storage (``prio``: a priority queue): its source, added to the
        dispatcher; ``retry`` is the queue's own policy, ``keep_results`` its records' time,
        ``rate_limit`` its window (``varmq.contract.rules.rate_limit``)."""
        keep = validate.seconds("keep_results", keep_results)
        rate = rules.rate_limit(f"queue {name or type(storage).__name__!r}", rate_limit)
        if retry is not None and not isinstance(retry, Retry):
            raise TypeError(f"retry must be a varmq.Retry or None, got {type(retry).__name__}")
        source = MemorySource(
            storage,
            self._settings(storage, priority, capacity, name, prio, retry),
            poison_limit=self._poison_limit,
            keep_results=keep,
            rate_limit=rate,
        )
        self._dispatch.add_source(source)
        if source.needs_timer():
            self._wake_timer()  # delayed jobs a queue loaded from a snapshot brought along
        return source

    def _require_records(self, storage: Any, method: str) -> None:
        """Refuse storage without job records for an err or result worker."""
        kind = "an err" if self._outcomes == "errs" else "a result"
        needs = (
            f"{method}: {kind} worker needs a queue that keeps job records (its jobs' outcomes "
            "go there, for any process to read)"
        )
        if not isinstance(storage, IJobRecords):
            raise TypeError(f"{needs}; {type(storage).__name__} keeps none")
        try:
            keep = float(storage.keep_results)
        except Exception:
            keep = 0.0
        if not keep > 0:
            label = getattr(storage, "name", None) or type(storage).__name__
            raise ValueError(f"{needs}; open queue {label!r} with keep_results=SECONDS")

    def made(self, handle: Q) -> Q:
        """Remember ``handle`` (just made by a bind) and return it."""
        self.handles.append(handle)
        return handle

    def topic(
        self,
        topics: Topics,
        pattern: str,
        *,
        max_pending: int,
        on_full: OnFull,
        block_timeout: float | None,
        name: str | None,
        priority: int | None,
    ) -> TopicSource:
        """Subscribe to ``topics``: the subscription's source, added to the dispatcher before
        the subscriber joins the topics' routes (so that every copy reaches the worker)."""
        if not isinstance(topics, Topics):
            raise TypeError(
                f"varmq: bind_topic needs the Topics of varmq.new_topics(), got "
                f"{type(topics).__name__}; to consume a storage topic, bind a queue of that "
                "storage to it (topics.bind(pattern, queue_name)) and bind that queue to the "
                "worker"
            )
        sub = topics._new_subscriber(
            pattern, max_pending, on_full, block_timeout, name or f"topic:{pattern}"
        )
        dispatch = self._dispatch
        source = TopicSource(
            sub,
            self._settings(sub, priority, 0, sub.name, False),
            signal=dispatch.signal,
            count_dropped=dispatch.count_dropped,
            next_id=self.producer.next_id,
            poison_limit=self._poison_limit,
        )
        dispatch.add_source(source)
        sub.sink = source.copied
        topics._add_subscriber(sub)  # only now: the routes it joins know its sink
        return source

    def storage(
        self,
        storage: Any,
        *,
        priority: int | None,
        capacity: int,
        distributed: bool,
        prio: bool,
        method: str = "bind",
    ) -> StorageSource:
        """Bind adapter storage: its source, added to the dispatcher (and subscribed to it,
        when ``distributed``). An err or result worker needs storage that keeps job records
        (``TypeError``/``ValueError`` naming ``method`` otherwise)."""
        if self._outcomes:
            self._require_records(storage, method)
        dispatch = self._dispatch
        source = StorageSource(
            storage,
            self._settings(storage, priority, capacity, None, prio),
            poison_limit=self._poison_limit,
            on_settled=dispatch.acks_settled,
            signal=dispatch.signal,
            thread_name=self._thread_name,
            keep_values=self._outcomes == "results",
        )
        if distributed:
            storage.subscribe(source.heard)
        dispatch.add_source(source)
        if self._worker_records is not None:
            source.keep_worker_record(self._worker_records)
        self._wake_timer()  # storage is polled and leases renewed while the worker runs
        return source
