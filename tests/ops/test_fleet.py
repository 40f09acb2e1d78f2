"""The supervisor's pieces that need no process: a child's command line, the import target of
a factory, the fleet's merged metrics."""

from __future__ import annotations

import argparse
import http.server
import threading
from collections.abc import Generator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from varmq.ops.fleet import child_arguments
from varmq.ops.fleet_metrics import FleetCollector
from varmq.ops.supervisor import factory_target


def make_workers() -> list[object]:
    return []


def test_a_child_gets_every_option_but_processes_and_serves_metrics_on_loopback() -> None:
    args = argparse.Namespace(
        target="myapp.tasks:app",
        grace=12.5,
        log_level="warning",
        queue=["mail", "billing"],
        concurrency=4,
        metrics_port=9100,
        metrics_host="0.0.0.0",
        processes="2",
    )
    assert child_arguments(args) == [
        "worker", "myapp.tasks:app", "--grace", "12.5", "--log-level", "warning",
        "--queue", "mail", "--queue", "billing", "--concurrency", "4",
        "--metrics-port", "0", "--metrics-host", "127.0.0.1",
    ]  # fmt: skip


def test_a_factory_is_imported_by_its_module_and_a_local_one_is_refused() -> None:
    assert factory_target(make_workers) == f"{__name__}:make_workers"

    def local() -> list[object]:
        return []

    with pytest.raises(ValueError, match="top level of a module"):
        factory_target(local)
    with pytest.raises(ValueError, match="top level"):
        factory_target(lambda: [])


def _serve(text: str) -> Generator[int, None, None]:
    body = text.encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()


def _child_metrics(done: int, running: int) -> str:
    """What a child serves, written by prometheus_client as a child's exporter writes it."""
    registry = CollectorRegistry()
    completed = Counter("varmq_jobs_completed", "Jobs completed", ["worker"], registry=registry)
    completed.labels("mailer").inc(done)
    gauge = Gauge("varmq_worker_running", "Jobs running", ["worker"], registry=registry)
    gauge.labels("mailer").set(running)
    return generate_latest(registry).decode()


def test_fleet_metrics_sum_counters_label_gauges_by_child_and_count_the_silent(
    tmp_path: Path,
) -> None:
    first = _serve(_child_metrics(3, 1))
    second = _serve(_child_metrics(4, 2))
    stranger = _serve("this is {not Prometheus text\n")
    files = {n: tmp_path / f"child-{n}.port" for n in (1, 2, 3, 4)}
    files[1].write_text(str(next(first)))
    files[2].write_text(str(next(second)))
    # child 3 has not written its port yet (starting); child 4's port was taken by another
    # program after it died
    files[4].write_text(str(next(stranger)))
    registry = CollectorRegistry()
    registry.register(FleetCollector(lambda: files))
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
    }
    for server in (first, second, stranger):
        server.close()
    assert samples[("varmq_jobs_completed_total", (("worker", "mailer"),))] == 7
    assert not any(name == "varmq_jobs_completed_created" for name, _ in samples)
    running = ("varmq_worker_running", (("child", "1"), ("worker", "mailer")))
    assert samples[running] == 1
    assert samples[("varmq_worker_running", (("child", "2"), ("worker", "mailer")))] == 2
    assert samples[("varmq_fleet_children", ())] == 2
    assert samples[("varmq_fleet_children_unreachable", ())] == 2
