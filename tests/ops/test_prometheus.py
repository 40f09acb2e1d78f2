"""The Prometheus collector, scraped over HTTP and parsed with prometheus_client's parser."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from conftest import http
from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.parser import text_string_to_metric_families

import varmq
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
    assert samples[("varmq_jobs_processing", w)] == 0
    assert samples[("varmq_jobs_pending", w)] == 0
    assert samples[("varmq_worker_concurrency", w)] == 3
    assert samples[("varmq_worker_status", (("status", "Idle"), *w))] == 1
    assert samples[("varmq_worker_status", (("status", "Paused"), *w))] == 0
    for counter in ("submitted", "completed", "successful", "failed"):
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


def test_a_failing_storage_leaves_its_queue_out_and_the_scrape_answers(
    exporter: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    class Down:
        def stats(self) -> dict[str, float]:
            raise ConnectionError("storage unreachable")

    storage = MemoryStorage()
    storage.new_queue("up").enqueue(_JOB)
    samples, _ = _scrape(
        exporter(workers={}, queues={"down": Down(), "up": storage.open_queue("up")})
    )
    assert samples[("varmq_queue_waiting", (("queue", "up"),))] == 1
    assert not any(labels == (("queue", "down"),) for _, labels in samples)
    assert any("storage unreachable" in r.getMessage() for r in caplog.records)
