"""The Prometheus collector, scraped over HTTP and parsed with prometheus_client's parser."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from conftest import http
from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.parser import text_string_to_metric_families

import varmq
from varmq.ops.view import COUNTERS
from varmq.prometheus import VarmqCollector
from varmq.testing.storage import MemoryStorage

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

_JOB = b'{"id": "", "status": "Created", "data": 1}'


def _scrape(base: str) -> tuple[Samples, dict[str, str]]:
    """Every sample by (name, sorted labels), and every family's type by name."""
    reply = http("GET", base + "/metrics")
    assert reply.status == 200
    samples: Samples = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(reply.body.decode()):
        types[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples, types


@pytest.fixture
def exporter(serve_wsgi: Callable[[Any], str]) -> Callable[..., str]:
    """``exporter(**collector_options)``: a registry with the collector, served over HTTP."""

    def make(**options: Any) -> str:
        registry = CollectorRegistry()
        VarmqCollector(registry=registry, **options)
        return serve_wsgi(make_wsgi_app(registry))

    return make


def _fail(job: varmq.Job[Any]) -> None:
    if job.data == "bad":
        raise ValueError("bad job")


def test_worker_counters_and_gauges_are_exported_with_units_and_labels(
    exporter: Callable[..., str], workers: list[Any]
) -> None:
    name = f"mailer-{uuid.uuid4().hex[:6]}"
    worker = varmq.new_worker(_fail, 3, name=name)
    workers.append(worker)
    queue = worker.bind_queue()
    for data in ("ok", "ok", "bad"):
        queue.add(data)
    assert worker.wait_until_idle(10)

    samples, types = _scrape(exporter(workers={name: worker}))

    w = (("worker", name),)
    assert samples[("varmq_jobs_submitted_total", w)] == 3
    assert samples[("varmq_jobs_completed_total", w)] == 3
    assert samples[("varmq_jobs_successful_total", w)] == 2
    assert samples[("varmq_jobs_failed_total", w)] == 1
    assert samples[("varmq_jobs_unacknowledged_total", w)] == 0  # jobs that will run again
    assert samples[("varmq_jobs_processing", w)] == 0
    assert samples[("varmq_jobs_pending", w)] == 0
    assert samples[("varmq_worker_concurrency", w)] == 3
    assert samples[("varmq_worker_status", (("status", "Idle"), *w))] == 1
    assert samples[("varmq_worker_status", (("status", "Paused"), *w))] == 0
    for counter in COUNTERS:
        assert types[f"varmq_jobs_{counter}"] == "counter"
    assert types["varmq_worker_concurrency"] == "gauge"


def test_workers_default_to_the_named_worker_registry(
    exporter: Callable[..., str], workers: list[Any]
) -> None:
    name = f"registered-{uuid.uuid4().hex[:6]}"
    workers.append(varmq.new_worker(lambda job: None, 4, name=name))
    samples, _ = _scrape(exporter())
    assert samples[("varmq_worker_concurrency", (("worker", name),))] == 4


def test_queue_gauges_come_from_the_storage_not_from_this_process(
    exporter: Callable[..., str], workers: list[Any]
) -> None:
    # Another process (here: another queue object on the same storage) added the jobs; this
    # process's worker is paused and two of its workers bind the queue.
    storage = MemoryStorage()
    producer = storage.new_queue("emails")
    names = [f"consumer-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    for name in names:
        worker = varmq.new_worker(lambda job: None, 1, name=name)
        workers.append(worker)
        worker.pause()
        assert worker.wait_until_paused(10)
        worker.with_distributed_queue(storage.new_distributed_queue("emails"))
    for _ in range(4):
        assert producer.enqueue(_JOB)
    assert producer.enqueue_delayed(_JOB, 600)
    taken = producer.dequeue_with_ack_id()
    assert taken is not None and producer.dead_letter(taken[1], "boom")
    assert producer.dequeue_with_ack_id() is not None

    samples, types = _scrape(exporter(workers={n: w for n, w in zip(names, workers, strict=True)}))

    q = (("queue", "emails"),)
    assert samples[("varmq_queue_waiting", q)] == 2  # once, not once per worker
    assert samples[("varmq_queue_in_flight", q)] == 1
    assert samples[("varmq_queue_delayed", q)] == 1
    assert samples[("varmq_queue_dead", q)] == 1
    assert samples[("varmq_queue_oldest_age_seconds", q)] >= 0
    assert types["varmq_queue_oldest_age_seconds"] == "gauge"
    for name in names:
        assert samples[("varmq_jobs_submitted_total", (("worker", name),))] == 0


def test_queue_gauges_of_every_queue_an_adapter_lists_without_any_worker(
    exporter: Callable[..., str],
) -> None:
    storage = MemoryStorage()
    storage.new_queue("a").enqueue(_JOB)
    urgent = storage.new_priority_queue("b")
    urgent.enqueue(_JOB, 1)
    urgent.enqueue(_JOB, 2)
    base = exporter(workers={}, queues=storage)
    samples, _ = _scrape(base)
    assert samples[("varmq_queue_waiting", (("queue", "a"),))] == 1
    assert samples[("varmq_queue_waiting", (("queue", "b"),))] == 2
    storage.new_queue("c")
    samples, _ = _scrape(base)
    assert samples[("varmq_queue_waiting", (("queue", "c"),))] == 0


def test_queues_may_be_given_by_name(exporter: Callable[..., str]) -> None:
    storage = MemoryStorage()
    q = storage.new_queue("jobs")
    q.enqueue(_JOB)
    samples, _ = _scrape(exporter(workers={}, queues={"renamed": q}))
    assert samples[("varmq_queue_waiting", (("queue", "renamed"),))] == 1


def test_process_label_goes_on_per_process_series_only(
    exporter: Callable[..., str], workers: list[Any]
) -> None:
    storage = MemoryStorage()
    worker = varmq.new_worker(lambda job: None, 1, name=f"p-{uuid.uuid4().hex[:6]}")
    workers.append(worker)
    worker.with_persistent_queue(storage.new_queue("jobs"))
    samples, _ = _scrape(exporter(workers=[worker], process="4242"))
    labels = (("process", "4242"), ("worker", worker.name))
    assert ("varmq_jobs_submitted_total", labels) in samples
    assert ("varmq_queue_waiting", (("queue", "jobs"),)) in samples


def test_a_storage_that_cannot_answer_is_down_with_its_counts_left_out(
    exporter: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    class Down:
        def stats(self) -> dict[str, float]:
            raise ConnectionError("storage unreachable")

    storage = MemoryStorage()
    storage.new_queue("up").enqueue(_JOB)
    samples, types = _scrape(
        exporter(workers={}, queues={"down": Down(), "up": storage.open_queue("up")})
    )
    assert samples[("varmq_queue_waiting", (("queue", "up"),))] == 1
    assert samples[("varmq_queue_storage_up", (("queue", "up"),))] == 1
    assert samples[("varmq_queue_storage_up", (("queue", "down"),))] == 0
    assert types["varmq_queue_storage_up"] == "gauge"
    down = [name for name, labels in samples if labels == (("queue", "down"),)]
    assert down == ["varmq_queue_storage_up"]  # no count at all, never a 0
    assert any("storage unreachable" in r.getMessage() for r in caplog.records)


def test_a_bound_queue_whose_storage_cannot_answer_is_down_not_empty(
    exporter: Callable[..., str], workers: list[Any]
) -> None:
    storage = MemoryStorage()
    worker = varmq.new_worker(lambda job: None, 1, name=f"o-{uuid.uuid4().hex[:6]}")
    workers.append(worker)
    worker.pause()
    assert worker.wait_until_paused(10)
    worker.with_persistent_queue(storage.new_queue("orders"))
    base = exporter(workers=[worker])
    q = (("queue", "orders"),)
    with storage.outage():
        samples, _ = _scrape(base)
    assert samples[("varmq_queue_storage_up", q)] == 0
    assert ("varmq_queue_waiting", q) not in samples
    samples, _ = _scrape(base)
    assert samples[("varmq_queue_storage_up", q)] == 1
    assert samples[("varmq_queue_waiting", q)] == 0


def test_a_store_whose_listing_fails_reports_the_queues_it_knew_as_down(
    exporter: Callable[..., str],
) -> None:
    storage = MemoryStorage()
    storage.new_queue("a").enqueue(_JOB)
    base = exporter(workers={}, queues=storage)
    assert _scrape(base)[0][("varmq_queue_storage_up", (("queue", "a"),))] == 1
    with storage.outage():
        samples, _ = _scrape(base)
    assert samples[("varmq_queue_storage_up", (("queue", "a"),))] == 0
    assert ("varmq_queue_waiting", (("queue", "a"),)) not in samples


# -- counters, durations, stuck jobs ----------------------------------------------------------


def test_every_counter_of_the_metrics_is_exported(
    exporter: Callable[..., str], workers: list[Any]
) -> None:
    def slow(job: varmq.Job[Any]) -> None:
        threading.Event().wait(0.3)  # runs past its timeout on purpose

    name = f"t-{uuid.uuid4().hex[:6]}"
    worker = varmq.new_worker(
        slow,
        1,
        name=name,
        timeout=0.05,
        retry=varmq.Retry(max_attempts=2, backoff=0),
        log_failures=False,
    )
    workers.append(worker)
    job = worker.bind_queue().add(1)
    assert job is not None and job.wait(10)  # closed once dead-lettered, after its retry
    samples, _ = _scrape(exporter(workers=[worker]))
    w = (("worker", name),)
    got = {c: samples[(f"varmq_jobs_{c}_total", w)] for c in COUNTERS}
    assert got == {c: float(getattr(worker.metrics, c)) for c in COUNTERS}
    assert (got["timed_out"], got["retried"], got["dead_lettered"], got["failed"]) == (2, 1, 1, 2)


def test_no_series_for_a_status_no_worker_can_have(
    exporter: Callable[..., str], workers: list[Any]
) -> None:
    worker = varmq.new_worker(lambda job: None, 1, name=f"s-{uuid.uuid4().hex[:6]}")
    workers.append(worker)
    samples, _ = _scrape(exporter(workers=[worker]))
    statuses = {dict(labels)["status"] for name, labels in samples if name == "varmq_worker_status"}
    assert "Unknown" not in statuses and "Idle" in statuses


def test_job_durations_are_a_histogram_per_worker(
    exporter: Callable[..., str], workers: list[Any]
) -> None:
    name = f"d-{uuid.uuid4().hex[:6]}"
    release = threading.Event()

    def run(job: varmq.Job[Any]) -> None:
        if job.data == "slow":
            release.wait(10)

    worker = varmq.new_worker(run, 2, name=name)
    workers.append(worker)
    base = exporter(workers=[worker], duration_buckets=[0.5, 60.0])  # observing from here on
    queue = worker.bind_queue()
    queue.add("fast")
    queue.add("fast")
    slow = queue.add("slow")
    assert slow is not None
    assert not slow.wait(0.6)  # the slow job runs longer than the first bucket on purpose
    release.set()
    assert worker.wait_until_idle(10)
    samples, types = _scrape(base)
    assert types["varmq_job_duration_seconds"] == "histogram"
    w = ("worker", name)

    def bucket(le: str) -> float:
        return samples[("varmq_job_duration_seconds_bucket", tuple(sorted([("le", le), w])))]

    assert (bucket("0.5"), bucket("60.0"), bucket("+Inf")) == (2, 3, 3)
    assert samples[("varmq_job_duration_seconds_count", (w,))] == 3
    assert samples[("varmq_job_duration_seconds_sum", (w,))] > 0.5


def test_the_oldest_running_job_of_each_queue_is_exported(
    exporter: Callable[..., str], workers: list[Any]
) -> None:
    started, release = threading.Event(), threading.Event()

    def stuck(job: varmq.Job[Any]) -> None:
        started.set()
        release.wait(10)

    worker = varmq.new_worker(stuck, 1, name=f"r-{uuid.uuid4().hex[:6]}")
    workers.append(worker)
    base = exporter(workers=[worker])
    worker.bind_queue(name="stuck").add(1)
    worker.bind_queue(name="calm")
    try:
        assert started.wait(10)
        assert not release.wait(0.2)  # let the job grow old on purpose
        samples, types = _scrape(base)
    finally:
        release.set()
    assert types["varmq_queue_oldest_running_age_seconds"] == "gauge"
    assert samples[("varmq_queue_oldest_running_age_seconds", (("queue", "stuck"),))] >= 0.2
    assert samples[("varmq_queue_oldest_running_age_seconds", (("queue", "calm"),))] == 0


def test_task_runs_are_counted_per_task_name_and_outcome(
    exporter: Callable[..., str], workers: list[Any]
) -> None:
    app = varmq.App()
    name = f"reports.build_{uuid.uuid4().hex[:6]}"

    @app.task(name=name)
    def build(rows: int) -> int:
        if rows < 0:
            raise ValueError("negative")
        return rows

    workers.append(app.worker(concurrency=2))
    for rows in (1, 2, 3, -1):
        build.enqueue(rows)
    app.run_until_idle(10)
    samples, types = _scrape(exporter(workers=[]))
    assert types["varmq_task_runs"] == "counter"
    labels = (("outcome", "succeeded"), ("task", name))
    assert samples[("varmq_task_runs_total", labels)] == 3
    assert samples[("varmq_task_runs_total", (("outcome", "failed"), ("task", name)))] == 1
    assert samples[("varmq_task_seconds_total", (("task", name),))] >= 0
