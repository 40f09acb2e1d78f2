"""Tasks: functions registered on a varmq.App, enqueued by name with typed JSON arguments and
run by an ordinary worker, in memory, on the reference storage and on sqliteq."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sqliteq
import varmq
from varmq.testing import MemoryStorage

WAIT = 10.0


@dataclasses.dataclass(frozen=True)
class Invoice:
    number: int
    due: dt.date


@pytest.fixture
def app() -> varmq.App:
    return varmq.App()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Any]:
    store = sqliteq.new(str(tmp_path / "jobs.db"))
    yield store
    store.close()


def test_a_task_runs_inline_and_on_a_worker_and_gives_its_typed_result(app: varmq.App) -> None:
    @app.task
    def issue(number: int, due: dt.date) -> Invoice:
        return Invoice(number, due + dt.timedelta(days=30))

    assert issue(1, dt.date(2026, 1, 1)) == Invoice(1, dt.date(2026, 1, 31))  # inline
    run = issue.enqueue(7, dt.date(2026, 2, 1))
    app.run_until_idle(WAIT)
    assert run.result(WAIT) == Invoice(7, dt.date(2026, 3, 3))  # rebuilt from the annotation
    record = run.status()
    assert (record.state, record.attempts) == ("succeeded", 1)
    assert record.result == {"number": 7, "due": "2026-03-03"}  # what the record stores


def test_a_task_is_named_by_its_module_and_two_functions_cannot_share_a_name(
    app: varmq.App,
) -> None:
    @app.task
    def charge(amount: int) -> None: ...

    assert charge.name == f"{__name__}.charge"
    assert app.tasks[charge.name] is charge

    def other(amount: int) -> None: ...

    with pytest.raises(ValueError, match="two functions under the task name") as caught:
        app.task(name=charge.name)(other)
    assert "charge" in str(caught.value) and "other" in str(caught.value)
    assert app.tasks[charge.name] is charge


def test_an_argument_without_a_json_form_names_the_task_and_parameter_and_stores_nothing(
    app: varmq.App,
) -> None:
    @app.task(name="upload")
    def upload(name: str, blob: Any) -> None: ...

    worker = app.worker(auto_run=False)
    with pytest.raises(TypeError, match="upload") as caught:
        upload.enqueue("a.txt", b"bytes")
    assert "blob" in str(caught.value)
    with pytest.raises(TypeError):
        upload.enqueue("a.txt")  # type: ignore[call-arg]
    assert worker.num_pending == 0


def test_using_gives_per_call_options_and_a_job_id_runs_once(app: varmq.App) -> None:
    ran: list[str] = []

    @app.task
    def note(text: str) -> str:
        ran.append(text)
        return text

    first = note.using(job_id="note-1").enqueue("a")
    again = note.using(job_id="note-1").enqueue("b")  # the id is taken: nothing new stored
    app.run_until_idle(WAIT)
    assert first.id == again.id == "note-1"
    assert ran == ["a"]
    assert again.result(WAIT) == "a"


def test_priorities_order_the_calls_of_a_queue(app: varmq.App) -> None:
    order: list[str] = []

    @app.task(priority=5)
    def low(name: str) -> None:
        order.append(name)

    @app.task(priority=1)
    def high(name: str) -> None:
        order.append(name)

    worker = app.worker(concurrency=1, auto_run=False)
    low.enqueue("low")
    high.enqueue("high")
    low.using(priority=0).enqueue("urgent")
    worker.start()
    app.run_until_idle(WAIT)
    assert order == ["urgent", "high", "low"]


def test_async_tasks_run_beside_plain_ones_and_alone_on_an_async_worker() -> None:
    mixed = varmq.App()

    @mixed.task
    async def double(n: int) -> int:
        await asyncio.sleep(0)
        return 2 * n

    @mixed.task
    def triple(n: int) -> int:
        return 3 * n

    assert asyncio.run(double(2)) == 4  # inline: the coroutine
    runs = [double.enqueue(5), triple.enqueue(5)]
    mixed.run_until_idle(WAIT)
    assert [run.result(WAIT) for run in runs] == [10, 15]

    only_async = varmq.App()
    loops: list[int] = []

    @only_async.task
    async def where() -> int:
        loops.append(id(asyncio.get_running_loop()))
        return 1

    runs = [where.enqueue() for _ in range(3)]
    only_async.run_until_idle(WAIT)
    assert [run.result(WAIT) for run in runs] == [1, 1, 1]
    assert len(set(loops)) == 1  # the worker's own loop, not one per job


def test_a_call_of_a_task_no_worker_knows_ends_in_a_dead_letter_naming_it(
    app: varmq.App,
) -> None:
    @app.task
    def known() -> None: ...

    run = app.enqueue("billing.refund", args=[42], kwargs={"reason": "late"})
    app.run_until_idle(WAIT)
    with pytest.raises(varmq.JobFailedError) as caught:
        run.result(WAIT)
    assert caught.value.state == "dead"
    assert caught.value.error_type == "UnknownTaskError"
    assert "billing.refund" in caught.value.message and "known" in caught.value.message
    handle = app._queue(app.default_queue).handle()
    letters = handle.dead_letters()
    assert len(letters) == 1 and "billing.refund" in letters[0].error


def test_a_task_with_its_own_retry_runs_again_and_one_without_runs_once(app: varmq.App) -> None:
    attempts: dict[str, int] = {"flaky": 0, "once": 0}

    @app.task(retry=varmq.Retry(max_attempts=3, backoff=0.0, jitter=False))
    def flaky() -> str:
        attempts["flaky"] += 1
        if attempts["flaky"] < 3:
            raise ConnectionError("try again")
        return "done"

    @app.task
    def once() -> None:
        attempts["once"] += 1
        raise ConnectionError("no")

    good, bad = flaky.enqueue(), once.enqueue()
    app.run_until_idle(WAIT)
    assert good.result(WAIT) == "done" and good.status().attempts == 3
    with pytest.raises(varmq.JobFailedError) as caught:
        bad.result(WAIT)
    assert (caught.value.state, caught.value.error_type) == ("dead", "ConnectionError")
    assert attempts == {"flaky": 3, "once": 1}


def test_a_task_timeout_fails_the_run(app: varmq.App) -> None:
    release = threading.Event()

    @app.task(timeout=0.05)
    def slow() -> None:
        release.wait(WAIT)

    run = slow.enqueue()
    with pytest.raises(varmq.JobFailedError) as caught:
        run.result(WAIT)
    release.set()
    assert caught.value.error_type == "JobTimeoutError"


def test_a_delayed_call_cancelled_never_runs(app: varmq.App) -> None:
    ran: list[int] = []

    @app.task
    def later(n: int) -> None:
        ran.append(n)

    run = later.using(delay=30).enqueue(1)
    assert run.status().state == "delayed"
    assert run.cancel() is True
    assert run.status().state == "cancelled"
    assert run.cancel() is False
    app.run_until_idle(WAIT)
    assert ran == []


def test_enqueue_async_and_result_async(app: varmq.App) -> None:
    @app.task
    def square(n: int) -> int:
        return n * n

    async def main() -> list[int]:
        runs = [await square.enqueue_async(n) for n in range(4)]
        return [await run.result_async(WAIT) for run in runs]

    assert asyncio.run(main()) == [0, 1, 4, 9]


def test_counts_per_task_name(app: varmq.App) -> None:
    @app.task(name="ok")
    def ok() -> None: ...

    @app.task(name="boom")
    def boom() -> None:
        raise RuntimeError("boom")

    for _ in range(3):
        ok.enqueue()
    boom.enqueue()
    app.run_until_idle(WAIT)
    counts = app.counts.snapshot()
    assert counts["ok"][:2] == (3, 0)
    assert counts["boom"][:2] == (0, 1)


def test_a_schedule_runs_a_task_with_its_arguments(app: varmq.App) -> None:
    seen = threading.Event()
    calls: list[tuple[str, int]] = []

    @app.task
    def tick(label: str, n: int) -> None:
        calls.append((label, n))
        seen.set()

    app.schedule(tick, every=0.05, args=("beat",), kwargs={"n": 3})
    app.worker()
    assert seen.wait(WAIT)
    assert calls[0] == ("beat", 3)


def test_registration_checks_its_options(app: varmq.App) -> None:
    def fn() -> None: ...

    with pytest.raises(ValueError, match="keep_results"):
        app.task(keep_results=0)(fn)
    with pytest.raises(TypeError, match="priority"):
        app.task(priority="high")(fn)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="Retry"):
        app.task(retry=3)(fn)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="App"):
        varmq.App(object())
    assert app.tasks == {}


@pytest.mark.parametrize("kind", ["reference", "sqliteq"])
def test_two_apps_on_one_store_share_calls_and_results_by_id(kind: str, sqlite_store: Any) -> None:
    store = MemoryStorage() if kind == "reference" else sqlite_store

    def declare(app: varmq.App) -> Any:
        @app.task(name="invoices.issue", queue="billing")
        def issue(number: int, due: dt.date) -> Invoice:
            return Invoice(number, due)

        return issue

    producer_app, consumer_app = varmq.App(store), varmq.App(store)
    issue = declare(producer_app)
    declare(consumer_app)
    run = issue.enqueue(3, dt.date(2026, 5, 1))
    assert run.status().state == "queued"
    consumer_app.worker("billing", concurrency=2)
    assert run.result(WAIT) == Invoice(3, dt.date(2026, 5, 1))
    by_id = issue.run_of(run.id)
    assert by_id.result(WAIT) == Invoice(3, dt.date(2026, 5, 1))
    assert producer_app.run_of(run.id, queue="billing").result(WAIT) == {
        "number": 3,
        "due": "2026-05-01",
    }
    if kind == "reference":
        store.close()
