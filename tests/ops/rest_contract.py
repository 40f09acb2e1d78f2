"""The REST API's contract, run once per interface (ASGI under uvicorn, WSGI under wsgiref).

A test class inherits :class:`RestContract` and provides ``factory`` (``asgi_app`` or
``wsgi_app``) and a ``serve`` fixture that runs an app over real HTTP and returns its base URL.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import http

import varmq
from varmq.testing.storage import MemoryStorage

Factory = Callable[..., Any]


def _name(prefix: str = "w") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class Gate:
    """A job function that holds every job until ``open()``; ``started`` counts jobs begun."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self.started = threading.Semaphore(0)

    def __call__(self, job: varmq.Job[Any]) -> None:
        self.started.release()
        assert self._open.wait(10), "gate never opened"

    def open(self) -> None:
        self._open.set()


def _noop(job: varmq.Job[Any]) -> None:
    pass


class RestContract:
    factory: Factory

    @pytest.fixture
    def serve(self) -> Callable[[Any], str]:
        raise NotImplementedError

    @pytest.fixture
    def workers(self) -> Iterator[list[Any]]:
        """Workers a test creates; stopped at its end."""
        made: list[Any] = []
        yield made
        for worker in made:
            if not worker.is_stopped and worker.status.value != "Initiated":
                worker.stop()
                worker.wait_until_stopped(10)

    @pytest.fixture
    def api(self, serve: Callable[[Any], str], workers: list[Any]) -> Callable[..., str]:
        """``api(workers_dict=..., **options)``: serve an app and return its base URL."""

        def make(**options: Any) -> str:
            if "token" not in options:
                options.setdefault("insecure", True)
            return serve(type(self).factory(**options))

        return make

    def new_worker(self, workers: list[Any], fn: Any = _noop, n: int = 2, **kw: Any) -> Any:
        worker = varmq.new_worker(fn, n, name=kw.pop("name", _name()), **kw)
        workers.append(worker)
        return worker

    # -- health and routing -------------------------------------------------------------------

    def test_health_answers_ok_as_json_with_a_trailing_newline(self, api: Any) -> None:
        reply = http("GET", api(workers={}) + "/health")
        assert reply.status == 200
        assert reply.headers["content-type"] == "application/json"
        assert reply.body.endswith(b"\n")
        assert reply.json() == {"status": "ok"}

    def test_prefix_is_stripped_and_nothing_answers_outside_it(self, api: Any) -> None:
        base = api(prefix="/varmq", workers={})
        assert http("GET", base + "/varmq/health").json() == {"status": "ok"}
        outside = http("GET", base + "/health")
        assert outside.status == 404
        assert outside.json() == {"error": "not found"}

    def test_unknown_route_is_404_with_a_json_error(self, api: Any) -> None:
        base = api(workers={})
        for path in ("/", "/nothing", "/workers/a/b", "/workers/a/actions", "/health/x"):
            reply = http("GET", base + path)
            assert reply.status == 404, path
            assert "error" in reply.json()

    def test_wrong_method_is_405_naming_the_allowed_one(self, api: Any, workers: list[Any]) -> None:
        worker = self.new_worker(workers)
        base = api(workers={worker.name: worker})
        for method, path, allowed in [
            ("POST", "/health", "GET"),
            ("DELETE", "/workers", "GET"),
            ("PATCH", f"/workers/{worker.name}", "GET"),
            ("GET", f"/workers/{worker.name}/actions/pause", "PATCH"),
            ("POST", f"/workers/{worker.name}/config/concurrency/3", "PATCH"),
            ("PATCH", "/queues", "GET"),
        ]:
            reply = http(method, base + path)
            assert reply.status == 405, (method, path)
            assert reply.headers["allow"] == allowed
            assert reply.json() == {"error": "method not allowed"}
        assert worker.is_active

    # -- workers ------------------------------------------------------------------------------

    def test_workers_lists_every_worker_with_its_summary(
        self, api: Any, workers: list[Any]
    ) -> None:
        a = self.new_worker(workers, n=3)
        b = self.new_worker(workers, n=5)
        reply = http("GET", api(workers={a.name: a, b.name: b}) + "/workers")
        assert reply.status == 200
        by_name = {s["name"]: s for s in reply.json()}
        assert set(by_name) == {a.name, b.name}
        assert by_name[a.name]["concurrency"] == 3
        assert by_name[b.name]["concurrency"] == 5
        assert set(by_name[a.name]) == {
            "name",
            "status",
            "concurrency",
            "num_processing",
            "num_pending",
            "num_idle_workers",
        }
        assert by_name[a.name]["status"] in ("Idle", "Running")

    def test_workers_default_to_the_named_worker_registry(
        self, api: Any, workers: list[Any]
    ) -> None:
        worker = self.new_worker(workers)
        base = api()
        assert worker.name in {s["name"] for s in http("GET", base + "/workers").json()}
        assert http("GET", base + f"/workers/{worker.name}").status == 200

    def test_workers_may_be_a_list_of_workers(self, api: Any, workers: list[Any]) -> None:
        worker = self.new_worker(workers)
        reply = http("GET", api(workers=[worker]) + "/workers")
        assert [s["name"] for s in reply.json()] == [worker.name]

    def test_worker_details_carry_the_summary_and_the_metrics(
        self, api: Any, workers: list[Any]
    ) -> None:
        worker = self.new_worker(workers)
        queue = worker.bind_queue()
        queue.add(1)
        queue.add(2)
        assert worker.wait_until_idle(10)
        reply = http("GET", api(workers={worker.name: worker}) + f"/workers/{worker.name}")
        assert reply.status == 200
        body = reply.json()
        assert body["name"] == worker.name
        assert body["concurrency"] == 2
        assert body["metrics"] == {
            "submitted": 2,
            "completed": 2,
            "successful": 2,
            "failed": 0,
            "retried": 0,
            "dead_lettered": 0,
            "lost": 0,
            "timed_out": 0,
            "released": 0,
            "unacknowledged": 0,
        }

    def test_unknown_worker_is_404_for_details_actions_and_concurrency(self, api: Any) -> None:
        base = api(workers={})
        for method, path in [
            ("GET", "/workers/ghost"),
            ("PATCH", "/workers/ghost/actions/pause"),
            ("PATCH", "/workers/ghost/config/concurrency/3"),
        ]:
            reply = http(method, base + path)
            assert reply.status == 404, path
            assert reply.json() == {"error": "worker not found"}

    def test_registry_entry_that_is_not_a_worker_is_404(self, api: Any) -> None:
        base = api(workers={"nil": None, "text": "not a worker"})
        assert http("GET", base + "/workers").json() == []
        for name in ("nil", "text"):
            assert http("GET", base + f"/workers/{name}").status == 404
            assert http("PATCH", base + f"/workers/{name}/actions/stop").status == 404

    def test_unknown_action_is_400_and_changes_nothing(self, api: Any, workers: list[Any]) -> None:
        worker = self.new_worker(workers)
        reply = http(
            "PATCH", api(workers={worker.name: worker}) + f"/workers/{worker.name}/actions/explode"
        )
        assert reply.status == 400
        assert "unknown action" in reply.json()["error"]
        assert worker.is_active

    @pytest.mark.parametrize("value", ["abc", "1.5", "0x10", "9" * 30, "%20"])
    def test_non_integer_concurrency_is_400(self, api: Any, workers: list[Any], value: str) -> None:
        worker = self.new_worker(workers)
        base = api(workers={worker.name: worker})
        reply = http("PATCH", base + f"/workers/{worker.name}/config/concurrency/{value}")
        assert reply.status == 400
        assert "invalid concurrency value" in reply.json()["error"]
        assert worker.num_concurrency == 2

    # -- actions ------------------------------------------------------------------------------

    def test_pause_and_resume_answer_200_with_an_empty_body(
        self, api: Any, workers: list[Any]
    ) -> None:
        worker = self.new_worker(workers)
        base = api(workers={worker.name: worker})
        paused = http("PATCH", base + f"/workers/{worker.name}/actions/pause")
        assert (paused.status, paused.body) == (200, b"")
        assert worker.wait_until_paused(10)
        resumed = http("PATCH", base + f"/workers/{worker.name}/actions/resume")
        assert (resumed.status, resumed.body) == (200, b"")
        assert worker.is_active

    def test_stop_answers_200_and_the_worker_stops(self, api: Any, workers: list[Any]) -> None:
        worker = self.new_worker(workers)
        reply = http(
            "PATCH", api(workers={worker.name: worker}) + f"/workers/{worker.name}/actions/stop"
        )
        assert reply.status == 200
        assert worker.wait_until_stopped(10)

    def test_restart_of_an_active_worker_answers_200_and_keeps_it_active(
        self, api: Any, workers: list[Any]
    ) -> None:
        worker = self.new_worker(workers)
        base = api(workers={worker.name: worker})
        assert http("PATCH", base + f"/workers/{worker.name}/actions/restart").status == 200
        assert worker.is_active

    def test_start_of_a_stopped_worker_answers_200(self, api: Any, workers: list[Any]) -> None:
        worker = self.new_worker(workers)
        worker.stop()
        assert worker.wait_until_stopped(10)
        base = api(workers={worker.name: worker})
        assert http("PATCH", base + f"/workers/{worker.name}/actions/start").status == 200
        assert worker.is_active

    def test_concurrency_change_answers_200_and_applies(self, api: Any, workers: list[Any]) -> None:
        worker = self.new_worker(workers)
        base = api(workers={worker.name: worker})
        reply = http("PATCH", base + f"/workers/{worker.name}/config/concurrency/5")
        assert (reply.status, reply.body) == (200, b"")
        assert worker.num_concurrency == 5
        details = http("GET", base + f"/workers/{worker.name}").json()
        assert details["concurrency"] == 5

    @pytest.mark.parametrize(
        ("state", "path", "message"),
        [
            ("active", "actions/start", "worker is already running"),
            ("initiated", "actions/restart", "worker is not running"),
            ("initiated", "actions/pause", "worker is not running"),
            ("active", "config/concurrency/2", "worker already has the same concurrency"),
            ("stopped", "actions/resume", "worker is stopped"),
            ("stopped", "actions/pause", "worker is stopped"),
            ("paused", "actions/start", "worker is paused"),
            ("paused", "config/concurrency/4", "worker is paused"),
        ],
    )
    def test_state_conflicts_answer_409_with_the_error(
        self, api: Any, workers: list[Any], state: str, path: str, message: str
    ) -> None:
        worker = self.new_worker(workers, auto_run=state != "initiated")
        if state == "stopped":
            worker.stop()
            assert worker.wait_until_stopped(10)
        elif state == "paused":
            worker.pause()
            assert worker.wait_until_paused(10)
        base = api(workers={worker.name: worker})
        reply = http("PATCH", base + f"/workers/{worker.name}/{path}")
        assert reply.status == 409
        assert reply.headers["content-type"] == "application/json"
        assert message in reply.json()["error"]

    def test_unexpected_worker_failure_is_500_without_a_traceback(
        self, api: Any, workers: list[Any], caplog: pytest.LogCaptureFixture
    ) -> None:
        class Broken(varmq.Worker[Any]):
            def pause(self) -> None:
                raise RuntimeError("disk on fire")

        worker = Broken(_noop, 1, name=_name())
        workers.append(worker)
        base = api(workers={worker.name: worker})
        with caplog.at_level(logging.ERROR, logger="varmq.rest"):
            reply = http("PATCH", base + f"/workers/{worker.name}/actions/pause")
        assert reply.status == 500
        assert reply.json() == {"error": "internal error"}
        assert b"Traceback" not in reply.body and b"disk on fire" not in reply.body
        assert any("disk on fire" in (r.exc_text or "") for r in caplog.records)

    # -- bearer token -------------------------------------------------------------------------

    def test_token_is_required_on_every_route_but_health(
        self, api: Any, workers: list[Any]
    ) -> None:
        worker = self.new_worker(workers)
        base = api(token="s3cret", workers={worker.name: worker})
        assert http("GET", base + "/health").status == 200
        for method, path in [
            ("GET", "/workers"),
            ("GET", f"/workers/{worker.name}"),
            ("PATCH", f"/workers/{worker.name}/actions/stop"),
            ("PATCH", f"/workers/{worker.name}/config/concurrency/9"),
            ("GET", "/queues"),
            ("GET", "/queues/q/dead"),
            ("GET", "/queues/q/jobs/job-1"),
            ("DELETE", "/queues/q/jobs/job-1"),
            ("GET", "/nothing"),
        ]:
            for header in (None, "Bearer wrong", "Bearer s3cret2", "Basic s3cret", "s3cret"):
                reply = http(method, base + path, header=header)
                assert reply.status == 401, (method, path, header)
                assert reply.headers["www-authenticate"] == "Bearer"
                assert reply.json() == {"error": "missing or wrong bearer token"}
        assert worker.is_active and worker.num_concurrency == 2
        assert http("GET", base + "/workers", token="s3cret").status == 200
        assert http("GET", base + "/workers", header="bearer s3cret").status == 200

    @pytest.mark.parametrize("token", ["", " ", "\t\n"])
    def test_an_empty_or_blank_token_is_refused_when_the_app_is_made(self, token: str) -> None:
        with pytest.raises(ValueError, match="empty or blank"):
            type(self).factory(token=token, workers={})

    def test_no_token_at_all_needs_insecure_true_and_then_warns(
        self, api: Any, workers: list[Any], caplog: pytest.LogCaptureFixture
    ) -> None:
        with pytest.raises(ValueError, match="insecure=True"):
            type(self).factory(workers={})
        with pytest.raises(ValueError, match="one or the other"):
            type(self).factory(token="t", insecure=True, workers={})
        with caplog.at_level(logging.WARNING, logger="varmq.rest"):
            type(self).factory(token="t", workers={})
        assert not caplog.records
        worker = self.new_worker(workers)
        with caplog.at_level(logging.WARNING, logger="varmq.rest"):
            base = api(insecure=True, workers={worker.name: worker})
        assert any("insecure=True" in r.getMessage() for r in caplog.records)
        assert http("PATCH", base + f"/workers/{worker.name}/actions/pause").status == 200

    # -- queues -------------------------------------------------------------------------------

    def test_queues_lists_each_bound_queue_with_its_storage_counts(
        self, api: Any, workers: list[Any]
    ) -> None:
        storage = MemoryStorage()
        orders = storage.new_queue("orders")
        first = self.new_worker(workers)
        second = self.new_worker(workers)
        first.pause()
        second.pause()
        assert first.wait_until_paused(10) and second.wait_until_paused(10)
        first.with_persistent_queue(storage.new_queue("orders"))
        second.with_persistent_queue(storage.new_queue("orders"))
        local = first.bind_queue(name="local")
        for n in range(3):
            assert orders.enqueue(b'{"id": "", "status": "Created", "data": %d}' % n)
        assert orders.enqueue_delayed(b'{"id": "", "status": "Created", "data": 9}', 600)
        assert orders.enqueue(b'{"id": "", "status": "Created", "data": 0}')
        taken = orders.dequeue_with_ack_id()
        assert taken is not None and orders.dead_letter(taken[1], "boom")
        held = orders.dequeue_with_ack_id()
        assert held is not None
        local.add("x")
        base = api(workers={first.name: first, second.name: second})

        listed = http("GET", base + "/queues")
        assert listed.status == 200
        by_name = {q["name"]: q for q in listed.json()}
        assert set(by_name) == {"orders", "local"}
        assert by_name["orders"]["waiting"] == 2
        assert by_name["orders"]["in_flight"] == 1
        assert by_name["orders"]["delayed"] == 1
        assert by_name["orders"]["dead"] == 1
        assert by_name["orders"]["oldest_age"] >= 0
        assert by_name["orders"]["kind"] == "fifo"
        assert sorted(by_name["orders"]["workers"]) == sorted([first.name, second.name])
        assert by_name["local"]["waiting"] == 1
        assert by_name["local"]["workers"] == [first.name]

        one = http("GET", base + "/queues/orders")
        assert one.status == 200
        same = {k: v for k, v in by_name["orders"].items() if k != "oldest_age"}
        assert {k: v for k, v in one.json().items() if k != "oldest_age"} == same

    def test_unknown_queue_is_404(self, api: Any, workers: list[Any]) -> None:
        worker = self.new_worker(workers)
        worker.bind_queue(name="known")
        reply = http("GET", api(workers={worker.name: worker}) + "/queues/unknown")
        assert reply.status == 404
        assert reply.json() == {"error": "queue not found"}

    # -- storage that cannot answer -----------------------------------------------------------

    def test_health_is_503_naming_the_queues_whose_storage_cannot_answer(
        self, api: Any, workers: list[Any]
    ) -> None:
        storage = MemoryStorage()
        worker = self.new_worker(workers)
        worker.pause()
        assert worker.wait_until_paused(10)
        worker.with_persistent_queue(storage.new_queue("orders"))
        worker.bind_queue(name="local")
        base = api(token="t", workers={worker.name: worker})
        assert http("GET", base + "/health").json() == {"status": "ok"}
        with storage.outage(ConnectionError("orders storage down at 10.1.2.3")):
            health = http("GET", base + "/health")
            listed = {q["name"]: q for q in http("GET", base + "/queues", token="t").json()}
        assert health.status == 503
        assert health.json() == {
            "status": "unavailable",
            "unreachable": [{"name": "orders", "storage": "varmq"}],
        }
        assert b"10.1.2.3" not in health.body  # /health needs no token: no error text there
        orders = listed["orders"]
        assert orders["reachable"] is False and orders["waiting"] is None
        assert "orders storage down" in orders["error"]
        assert listed["local"]["reachable"] is True and listed["local"]["waiting"] == 0
        assert http("GET", base + "/health").status == 200

    # -- dead letters -------------------------------------------------------------------------

    def _buried(self, workers: list[Any], n: int) -> tuple[Any, MemoryStorage]:
        storage = MemoryStorage()
        worker = self.new_worker(workers)
        worker.pause()
        assert worker.wait_until_paused(10)
        worker.with_persistent_queue(storage.new_queue("orders"))
        producer = storage.new_queue("orders")
        for i in range(n):
            assert producer.enqueue(b'{"id": "job-%d", "status": "Created", "data": %d}' % (i, i))
            taken = producer.dequeue_with_ack_id()
            assert taken is not None and producer.dead_letter(taken[1], f"boom {i}")
        return worker, storage

    def test_dead_letters_of_a_bound_queue_are_listed_oldest_first(
        self, api: Any, workers: list[Any]
    ) -> None:
        worker, _ = self._buried(workers, 3)
        base = api(token="t", workers={worker.name: worker})
        reply = http("GET", base + "/queues/orders/dead", token="t")
        assert reply.status == 200
        letters = reply.json()
        assert [(d["id"], d["data"], d["error"]) for d in letters] == [
            ("job-0", 0, "boom 0"),
            ("job-1", 1, "boom 1"),
            ("job-2", 2, "boom 2"),
        ]
        assert {"key", "attempts", "dead_at", "item"} <= set(letters[0])
        limited = http("GET", base + "/queues/orders/dead?limit=2", token="t").json()
        assert [d["id"] for d in limited] == ["job-0", "job-1"]

    def test_dead_letters_of_an_in_memory_queue_are_listed_too(
        self, api: Any, workers: list[Any]
    ) -> None:
        def fail(job: varmq.Job[Any]) -> None:
            raise ValueError("always")

        worker = self.new_worker(workers, fail, retry=varmq.Retry(max_attempts=1))
        job = worker.bind_queue(name="mem").add({"n": 1})
        assert job is not None and worker.wait_until_idle(10)
        letters = http("GET", api(workers={worker.name: worker}) + "/queues/mem/dead").json()
        assert [(d["data"], d["item"]) for d in letters] == [({"n": 1}, None)]
        assert letters[0]["error"].startswith("ValueError: always")

    @pytest.mark.parametrize("limit", ["0", "-1", "x", "10001", "1.5", ""])
    def test_a_bad_dead_letter_limit_is_400(self, api: Any, workers: list[Any], limit: str) -> None:
        worker, _ = self._buried(workers, 1)
        base = api(workers={worker.name: worker})
        reply = http("GET", base + f"/queues/orders/dead?limit={limit}")
        assert reply.status == 400
        assert "invalid limit" in reply.json()["error"]

    def test_dead_letters_of_an_unknown_or_unreachable_queue(
        self, api: Any, workers: list[Any]
    ) -> None:
        worker, storage = self._buried(workers, 1)
        base = api(workers={worker.name: worker})
        assert http("GET", base + "/queues/nope/dead").json() == {"error": "queue not found"}
        with storage.outage(ConnectionError("gone")):
            reply = http("GET", base + "/queues/orders/dead")
        assert reply.status == 503
        assert "queue 'orders' is unreachable" in reply.json()["error"]

    # -- jobs by id ---------------------------------------------------------------------------

    def test_a_job_of_a_storage_queue_is_read_by_id_and_cancelled_while_queued(
        self, api: Any, workers: list[Any]
    ) -> None:
        storage = MemoryStorage()
        worker = self.new_worker(workers)
        worker.pause()
        assert worker.wait_until_paused(10)
        handle = worker.with_persistent_queue(storage.new_queue("orders", keep_results=60))
        assert handle.add({"n": 1}, job_id="job-1")
        base = api(token="t", workers={worker.name: worker})

        reply = http("GET", base + "/queues/orders/jobs/job-1", token="t")
        assert reply.status == 200
        record = reply.json()
        assert (record["id"], record["state"], record["attempts"]) == ("job-1", "queued", 0)
        assert record["enqueued_at"] > 0 and record["finished_at"] is None

        cancelled = http("DELETE", base + "/queues/orders/jobs/job-1", token="t")
        assert cancelled.status == 200
        assert cancelled.json() == {"cancelled": True}
        assert handle.job("job-1").state == "cancelled"
        again = http("DELETE", base + "/queues/orders/jobs/job-1", token="t")
        assert again.status == 409
        assert again.json() == {"error": "job 'job-1' already ended (cancelled)"}

    def test_a_running_job_cancelled_by_id_ends_cancelled(
        self, api: Any, workers: list[Any]
    ) -> None:
        gate = Gate()
        worker = self.new_worker(workers, gate, 1)
        handle = worker.bind_queue(name="slow", keep_results=60)
        handle.add("x", job_id="r-1")
        assert gate.started.acquire(timeout=10)
        base = api(workers={worker.name: worker})
        assert http("GET", base + "/queues/slow/jobs/r-1").json()["state"] == "running"
        reply = http("DELETE", base + "/queues/slow/jobs/r-1")
        assert (reply.status, reply.json()) == (200, {"cancelled": True})
        with pytest.raises(varmq.JobFailedError, match="cancelled"):
            handle.result_of("r-1", 10)
        gate.open()

    def test_a_running_job_shows_its_progress_and_its_end_keeps_it(
        self, api: Any, workers: list[Any]
    ) -> None:
        said, release = threading.Event(), threading.Event()

        def work(job: varmq.Job[Any]) -> None:
            job.set_progress(0.25, "a quarter")
            said.set()
            assert release.wait(10), "never released"

        worker = self.new_worker(workers, work, 1)
        handle = worker.bind_queue(name="reports", keep_results=60)
        handle.add("x", job_id="p-1")
        assert said.wait(10)
        base = api(workers={worker.name: worker})
        running = http("GET", base + "/queues/reports/jobs/p-1").json()
        assert running["state"] == "running"
        assert running["progress"] == {"fraction": 0.25, "message": "a quarter"}
        release.set()
        assert handle.result_of("p-1", 10) is None
        ended = http("GET", base + "/queues/reports/jobs/p-1").json()
        assert (ended["state"], ended["progress"]) == (
            "succeeded",
            {"fraction": 0.25, "message": "a quarter"},
        )

    def test_a_finished_in_memory_job_shows_its_result(self, api: Any, workers: list[Any]) -> None:
        worker = varmq.new_result_worker(lambda job: job.data * 2, 1, name=_name())
        workers.append(worker)
        handle = worker.bind_queue(name="doubles", keep_results=60)
        handle.add(21, job_id="d-1")
        assert handle.result_of("d-1", 10) == 42
        base = api(workers={worker.name: worker})
        reply = http("GET", base + "/queues/doubles/jobs/d-1")
        assert reply.status == 200
        record = reply.json()
        assert (record["state"], record["result"], record["attempts"]) == ("succeeded", 42, 1)
        assert record["error"] is None

    def test_a_failed_job_shows_its_error_type_and_message(
        self, api: Any, workers: list[Any]
    ) -> None:
        def fail(job: varmq.Job[Any]) -> None:
            raise KeyError("no such customer")

        worker = self.new_worker(workers, fail, log_failures=False)
        handle = worker.bind_queue(name="fails", keep_results=60)
        handle.add(1, job_id="f-1")
        with pytest.raises(varmq.JobFailedError):
            handle.result_of("f-1", 10)
        base = api(workers={worker.name: worker})
        error = http("GET", base + "/queues/fails/jobs/f-1").json()["error"]
        assert error["type"] == "KeyError" and "no such customer" in error["message"]
        assert "Traceback" in error["traceback"]

    def test_unknown_jobs_and_queues_and_queues_without_records(
        self, api: Any, workers: list[Any]
    ) -> None:
        worker = self.new_worker(workers)
        worker.bind_queue(name="kept", keep_results=60)
        worker.bind_queue(name="plain")
        base = api(workers={worker.name: worker})
        for method in ("GET", "DELETE"):
            missing = http(method, base + "/queues/kept/jobs/nope")
            assert (missing.status, missing.json()) == (404, {"error": "job not found"})
            nowhere = http(method, base + "/queues/other/jobs/j")
            assert (nowhere.status, nowhere.json()) == (404, {"error": "queue not found"})
            plain = http(method, base + "/queues/plain/jobs/j")
            assert plain.status == 400
            assert "keeps no job records" in plain.json()["error"]
            assert "keep_results" in plain.json()["error"]
        refused = http("PATCH", base + "/queues/kept/jobs/j")
        assert refused.status == 405
        assert refused.headers["allow"] == "GET, DELETE"

    def test_a_job_of_an_unreachable_queue_is_503(self, api: Any, workers: list[Any]) -> None:
        storage = MemoryStorage()
        worker = self.new_worker(workers)
        worker.pause()
        assert worker.wait_until_paused(10)
        worker.with_persistent_queue(storage.new_queue("orders", keep_results=60))
        base = api(workers={worker.name: worker})
        with storage.outage(ConnectionError("gone")):
            read = http("GET", base + "/queues/orders/jobs/j")
            cancel = http("DELETE", base + "/queues/orders/jobs/j")
        for reply in (read, cancel):
            assert reply.status == 503
            assert "queue 'orders' is unreachable: ConnectionError: gone" in reply.json()["error"]

    # -- control calls are bounded ------------------------------------------------------------

    def test_control_calls_on_a_hanging_worker_answer_in_time_and_health_still_answers(
        self, api: Any, workers: list[Any]
    ) -> None:
        gate = Gate()
        worker = self.new_worker(workers, gate, n=1)
        assert worker.bind_queue().add(1) is not None
        assert gate.started.acquire(timeout=10)
        base = api(workers={worker.name: worker}, control_timeout=0.2, control_threads=2)
        replies: list[Any] = []
        lock = threading.Lock()

        def restart() -> None:
            reply = http("PATCH", base + f"/workers/{worker.name}/actions/restart")
            with lock:
                replies.append(reply)

        callers = [threading.Thread(target=restart) for _ in range(8)]
        try:
            for caller in callers:
                caller.start()
            for caller in callers:
                caller.join(10)
            statuses = sorted(r.status for r in replies)
            assert len(statuses) == 8 and set(statuses) <= {409, 503}, statuses
            assert 503 in statuses  # the first: still running, goes on in the background
            busy = [r.json()["error"] for r in replies if r.status == 409]
            assert all("still busy with a restart" in e for e in busy)
            assert http("GET", base + "/health").json() == {"status": "ok"}
            assert http("GET", base + "/workers").status == 200
        finally:
            gate.open()
        assert worker.wait_until_idle(10)
