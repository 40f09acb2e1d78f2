"""Acceptance: tasks across real processes, through ``varmq worker MODULE:APP``.

Each test runs on sqliteq (a file in the test's directory) and on redisq (the test session's
redis-server), with queues of its own (``tests/acceptance/task_app.py``, named by a fresh
prefix). The consumers are ``python -m varmq worker tests.acceptance.task_app:app`` processes;
the test process follows every call by its id (``task.run_of(id)``), with a deadline on every
wait.

- A producer process enqueues 200 calls of four tasks, by task object and by name; two
  consumers run them; every result comes back typed (dataclasses, datetimes, dates, Decimals,
  UUIDs, Enums rebuilt), every id exactly once, the retrying task after 2 attempts, and the
  consumers' own counts add up to 200 completed runs.
- A call of a task no consumer knows, enqueued by name, ends in the dead letters with
  ``UnknownTaskError`` naming it; the calls around it run.
- SIGTERM to a consumer running slow tasks: it exits 0 after finishing them, hands the taken
  ones back, and a second consumer runs the rest: every call ends once (duplicates are named).
- SIGTERM the moment a consumer runs its first call: the command handles it (an App's worker
  starts only once ``varmq.run`` handles signals), so the call finishes and nothing waits for
  a lease.
- ``--queue Q`` runs Q's tasks only: a call on the other queue stays queued until a worker of
  that queue starts.
- ``examples/tasks_fastapi/demo.py`` runs to completion.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

import varmq
from tests.acceptance.process_tools import ROOT, STORES, spawn, store_url
from tests.acceptance.task_app import (
    KINDS,
    Level,
    Receipt,
    Tally,
    TaskApp,
    expected_price,
    expected_tally,
    order_call,
    tally_call,
)

pytestmark = pytest.mark.timeout(60)

CALLS = 200
GRACE = 10.0
"""``--grace`` of every consumer: far longer than any task here runs."""
RESULTS_TIMEOUT = 30.0
"""Seconds the test gives all the calls of one test to end."""
STOP_TIMEOUT = GRACE + 15
NAP_SECONDS = 0.5
UNKNOWN = "tests.acceptance.task_app.refund"


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url(request, tmp_path)


@pytest.fixture
def prefix() -> str:
    """The start of the test's queue names: its own queues on the session's Redis."""
    return f"tasks-{uuid.uuid4().hex[:10]}-"


@pytest.fixture
def tasks(store: str, prefix: str) -> Iterator[TaskApp]:
    """The test process's own App over the store, to enqueue and follow calls."""
    app = TaskApp(store, prefix)
    yield app
    app.close()


class Consumer:
    """A ``varmq worker`` process of ``task_app:app``. A thread copies its stderr to a file
    (so it never blocks on a full pipe) and sets ``started`` at its start-up line."""

    def __init__(
        self,
        store: str,
        prefix: str,
        log: Path,
        processes: list[subprocess.Popen[str]],
        *options: str,
    ) -> None:
        paths = [str(ROOT), str(ROOT / "adapters"), os.environ.get("PYTHONPATH", "")]
        env = {
            **os.environ,
            "VARMQ_TASKS_STORE": store,
            "VARMQ_TASKS_PREFIX": prefix,
            "PYTHONPATH": os.pathsep.join(p for p in paths if p),
        }
        command = [sys.executable, "-m", "varmq", "worker", "tests.acceptance.task_app:app"]
        command += ["--concurrency", "4", "--grace", str(GRACE), *options]
        self.log = log
        self.started = threading.Event()
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        processes.append(self.process)
        self._copier = threading.Thread(target=self._copy, daemon=True)
        self._copier.start()

    def _copy(self) -> None:
        assert self.process.stderr is not None
        with self.log.open("w") as out:
            for line in self.process.stderr:
                out.write(line)
                out.flush()
                if "varmq: starting" in line:
                    self.started.set()
        self.started.set()  # it exited: nobody waits for a line that will not come

    @property
    def pid(self) -> int:
        return self.process.pid

    def stderr(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def stop(self, *, when_started: bool = True) -> str:
        """SIGTERM, then its exit: 0 (a clean drain) or the assertion fails; its stderr.

        ``when_started``: the signal waits until the service handles SIGTERM: its start-up
        line, logged just before it installs its handler, then (on Linux) until the kernel
        says the handler is there. Sent earlier, the default action kills the process."""
        if when_started:
            assert self.started.wait(STOP_TIMEOUT), f"no start-up line:\n{self.stderr()}"
            deadline = Deadline(STOP_TIMEOUT)
            # Polling the kernel's view of another process: there is nothing to wait on.
            while _catches_sigterm(self.pid) is False and self.process.poll() is None:
                assert not deadline.passed(), f"SIGTERM never handled:\n{self.stderr()}"
                time.sleep(0.005)
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=STOP_TIMEOUT)
        self._copier.join(timeout=STOP_TIMEOUT)
        err = self.stderr()
        assert code == 0, f"the consumer exited {code}:\n{err[-3000:]}"
        return err


def _catches_sigterm(pid: int) -> bool | None:
    """Whether process ``pid`` has a SIGTERM handler (the ``SigCgt`` mask of Linux's
    ``/proc/PID/status``); ``None`` where that cannot be read."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return None


def _completed(stderr: str) -> int:
    """The ``N jobs completed`` of a consumer's stop summary."""
    line = next(s for s in stderr.splitlines() if "after SIGTERM:" in s)
    return int(line.split("after SIGTERM: ", 1)[1].split(" job", 1)[0])


class Deadline:
    """One deadline for several waits: ``left()`` seconds, never below 0.1."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.1, self.end - time.monotonic())

    def passed(self) -> bool:
        return time.monotonic() >= self.end


def _logs(*consumers: Consumer) -> str:
    return "\n".join(f"--- consumer {c.pid} ---\n{c.stderr()[-2000:]}" for c in consumers)


def _naps(log: Path) -> list[tuple[str, str, int]]:
    """``(start|done, tag, pid)`` of each line the ``nap`` task wrote to ``log``."""
    text = log.read_text() if log.exists() else ""
    return [(kind, tag, int(pid)) for kind, tag, pid in (s.split() for s in text.splitlines())]


def _wait_for_starts(log: Path, count: int, consumer: Consumer, deadline: Deadline) -> None:
    """Until ``count`` naps started: polling the log another process writes (there is nothing
    to wait on)."""
    while sum(kind == "start" for kind, _, _ in _naps(log)) < count:
        assert not deadline.passed(), f"{count} naps never started:\n{_logs(consumer)}"
        assert consumer.process.poll() is None, f"the consumer exited:\n{_logs(consumer)}"
        time.sleep(0.01)


def _dead_letters(store: Any, queue: str) -> list[varmq.DeadLetter]:
    handle = varmq.new_distributed_priority_queue(store.new_distributed_priority_queue(queue))
    return handle.dead_letters()


def _left(store: Any, queue: str) -> dict[str, Any]:
    stats: dict[str, Any] = store.new_distributed_priority_queue(queue).stats()
    return stats


def test_a_producer_process_and_two_consumers_every_call_typed_and_once(
    store: str,
    prefix: str,
    tasks: TaskApp,
    processes: list[subprocess.Popen[str]],
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    consumers = [Consumer(store, prefix, tmp_path / f"c{i}.err", processes) for i in range(2)]
    markers = tmp_path / "markers"
    markers.mkdir()
    producer = spawn(
        "tests.acceptance.task_app", "produce", store, prefix, str(CALLS), str(markers)
    )
    processes.append(producer)
    out, _ = producer.communicate(timeout=30)
    lines = out.splitlines()
    assert producer.returncode == 0 and lines[-1:] == ["produced"], lines[-3:]
    calls = [json.loads(line) for line in lines[:-1]]
    assert [c["n"] for c in calls] == list(range(CALLS))
    ids = [c["id"] for c in calls]
    assert len(set(ids)) == CALLS, "the producer made an id twice"

    deadline = Deadline(RESULTS_TIMEOUT)
    pids = {c.pid for c in consumers}
    ran_by: Counter[int] = Counter()
    for call in calls:
        n, kind, job_id = call["n"], call["kind"], call["id"]
        assert kind == KINDS[n % len(KINDS)]
        try:
            if kind.startswith("price"):
                receipt = tasks.price_order.run_of(job_id).result(timeout=deadline.left())
                assert type(receipt) is Receipt, receipt
                assert type(receipt.total) is Decimal and type(receipt.placed) is datetime
                assert type(receipt.due) is date and type(receipt.ref) is UUID
                assert type(receipt.level) is Level
                assert receipt.placed.utcoffset() == timedelta(hours=2), receipt
                got = (receipt.sku, receipt.total, receipt.placed, receipt.due, receipt.ref)
                assert (*got, receipt.level) == expected_price(n), (n, receipt)
                ran_by[receipt.pid] += 1
            elif kind.startswith("tally"):
                answer = tasks.tally.run_of(job_id).result(timeout=deadline.left())
                assert type(answer) is Tally and type(answer.on) is date, answer
                assert type(answer.level) is Level, answer
                assert (answer.on, answer.letters, answer.level) == expected_tally(n), answer
                ran_by[answer.pid] += 1
            else:
                assert tasks.flaky.run_of(job_id).result(timeout=deadline.left()) == 2 * n
        except (TimeoutError, varmq.JobFailedError) as exc:
            message = f"call {n} ({kind}, {job_id}): {exc!r}\n{_logs(*consumers)}"
            raise AssertionError(message) from None
        queue = tasks.aside_queue if kind.startswith("tally") else tasks.main_queue
        record = tasks.app.run_of(job_id, queue=queue).status()
        attempts = 2 if kind == "flaky" else 1
        assert (record.state, record.attempts) == ("succeeded", attempts), (kind, record)
    waited = time.monotonic() - started
    assert set(ran_by) <= pids, f"results from processes that are no consumer: {ran_by}"

    completed = [_completed(c.stop()) for c in consumers]
    # Each consumer counts the runs it completed: together, every call exactly once.
    assert sum(completed) == CALLS, f"runs completed per consumer: {completed}"
    for queue in (tasks.main_queue, tasks.aside_queue):
        assert _dead_letters(tasks.store, queue) == []
        left = _left(tasks.store, queue)
        assert (left["waiting"], left["in_flight"]) == (0, 0), (queue, left)
    assert len(list(markers.iterdir())) == CALLS // len(KINDS), "a flaky call never failed"
    print(
        f"\n{CALLS} calls from a producer process, all read typed in {waited:.1f} s; runs per "
        f"consumer {completed}; flaky calls after 2 attempts each"
    )


def test_a_call_of_a_task_no_consumer_knows_ends_in_the_dead_letters(
    store: str,
    prefix: str,
    tasks: TaskApp,
    processes: list[subprocess.Popen[str]],
    tmp_path: Path,
) -> None:
    order, placed, ref, discount = order_call(3)
    before = tasks.app.enqueue(tasks.price_order.name, args=[order, placed, ref])
    unknown = tasks.app.enqueue(UNKNOWN, args=[order], kwargs={"reason": "damaged"})
    after = tasks.app.enqueue(
        tasks.price_order.name, args=[order, placed, ref], kwargs={"discount": discount}
    )
    consumer = Consumer(store, prefix, tmp_path / "c.err", processes)
    deadline = Deadline(RESULTS_TIMEOUT)

    for run in (before, after):
        assert tasks.price_order.run_of(run.id).result(timeout=deadline.left()).sku == "sku-3"
    with pytest.raises(varmq.JobFailedError) as failed:
        unknown.result(timeout=deadline.left())
    assert "UnknownTaskError" in str(failed.value) and UNKNOWN in str(failed.value)

    record = unknown.status()
    assert record.state == "dead" and record.attempts == 1, record
    assert record.error is not None and record.error.type == "UnknownTaskError", record
    # The message names the task and those the worker knows.
    assert UNKNOWN in record.error.message, record.error
    assert tasks.price_order.name in record.error.message, record.error
    letters = _dead_letters(tasks.store, tasks.main_queue)
    assert [(d.id, d.attempts) for d in letters] == [(unknown.id, 1)], letters
    assert letters[0].error.startswith("UnknownTaskError") and UNKNOWN in letters[0].error
    assert letters[0].data == {
        "task": UNKNOWN,
        "args": [
            {"sku": "sku-3", "quantity": 4, "unit_price": str(order.unit_price), "level": "low"}
        ],
        "kwargs": {"reason": "damaged"},
    }, letters[0].data
    # "completed": ran to a final outcome, the dead letter included.
    assert _completed(consumer.stop()) == 3


def test_sigterm_with_slow_tasks_running_exits_0_and_every_call_ends_once(
    store: str,
    prefix: str,
    tasks: TaskApp,
    processes: list[subprocess.Popen[str]],
    tmp_path: Path,
) -> None:
    calls = 16
    log = tmp_path / "naps.log"
    runs = [tasks.nap.enqueue(NAP_SECONDS, f"nap-{i:02d}", str(log)) for i in range(calls)]
    first = Consumer(store, prefix, tmp_path / "first.err", processes)

    deadline = Deadline(RESULTS_TIMEOUT)
    _wait_for_starts(log, 4, first, deadline)
    running = {tag for kind, tag, _ in _naps(log) if kind == "start"}
    err = first.stop()  # 4 naps running: they finish within the grace, exit 0
    summary = next(s for s in err.splitlines() if "after SIGTERM:" in s)
    assert "0 still running" in summary and "0 not acknowledged" in summary, summary
    finished_by_first = {
        tag for kind, tag, pid in _naps(log) if kind == "done" and pid == first.pid
    }
    assert running <= finished_by_first, f"SIGTERM cut running naps short: {summary}"

    second = Consumer(store, prefix, tmp_path / "second.err", processes)
    for run in runs:
        try:
            run.result(timeout=deadline.left())
        except (TimeoutError, varmq.JobFailedError) as exc:
            raise AssertionError(f"{run.id}: {exc!r}\n{_logs(first, second)}") from None
    records = [run.status() for run in runs]
    second.stop()

    done = Counter(tag for kind, tag, _ in _naps(log) if kind == "done")
    started = Counter(tag for kind, tag, _ in _naps(log) if kind == "start")
    twice = sorted(tag for tag, count in started.items() if count > 1)
    lost = sorted(f"nap-{i:02d}" for i in range(calls) if not done[f"nap-{i:02d}"])
    assert (twice, lost) == ([], []), f"ran twice: {twice}; never done: {lost}; {summary}"
    assert [(r.state, r.attempts) for r in records] == [("succeeded", 1)] * calls, records
    by_first = sum(1 for _, _, pid in _naps(log) if pid == first.pid) // 2
    print(f"\nSIGTERM with {len(running)} naps running; first consumer ran {by_first}: {summary}")


def test_sigterm_as_soon_as_a_call_runs_stops_the_consumer_cleanly(
    store: str,
    prefix: str,
    tasks: TaskApp,
    processes: list[subprocess.Popen[str]],
    tmp_path: Path,
) -> None:
    log = tmp_path / "nap.log"
    run = tasks.nap.enqueue(NAP_SECONDS, "nap", str(log))
    # --metrics-port widens the window (prometheus_client is imported in it) from a few
    # milliseconds to a hundred or so: without the fix, the process dies nearly every time.
    consumer = Consumer(store, prefix, tmp_path / "c.err", processes, "--metrics-port", "0")
    _wait_for_starts(log, 1, consumer, Deadline(RESULTS_TIMEOUT))
    consumer.stop(when_started=False)  # a service that runs a call handles SIGTERM
    assert run.result(timeout=1) == "nap"
    assert run.status().attempts == 1


def test_a_worker_of_one_queue_leaves_the_other_queues_calls_queued(
    store: str,
    prefix: str,
    tasks: TaskApp,
    processes: list[subprocess.Popen[str]],
    tmp_path: Path,
) -> None:
    # The call on the other queue first: a worker that took any queue's jobs would take it.
    order, placed, ref, _ = order_call(5)
    other = tasks.price_order.enqueue(order, placed, ref)
    asides = [tasks.tally.enqueue(*tally_call(n)) for n in range(10)]
    aside = Consumer(store, prefix, tmp_path / "aside.err", processes, "--queue", tasks.aside_queue)
    deadline = Deadline(RESULTS_TIMEOUT)
    for n, run in enumerate(asides):
        answer = run.result(timeout=deadline.left())
        assert (answer.on, answer.letters, answer.level) == expected_tally(n), answer
        assert answer.pid == aside.pid
    record = other.status()
    assert (record.state, record.attempts) == ("queued", 0), record
    err = aside.stop()
    assert _completed(err) == len(asides)
    starting = err.split("varmq: starting", 1)[1].splitlines()[0]
    assert repr(tasks.main_queue) not in starting and repr(tasks.aside_queue) in starting, err
    assert other.status().state == "queued"

    main = Consumer(store, prefix, tmp_path / "main.err", processes, "--queue", tasks.main_queue)
    assert other.result(timeout=deadline.left()).pid == main.pid
    assert _completed(main.stop()) == 1


def test_the_tasks_fastapi_demo_runs() -> None:
    env = dict(os.environ)
    paths = [str(ROOT), str(ROOT / "adapters"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    script = ROOT / "examples" / "tasks_fastapi" / "demo.py"
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=45,
    )
    assert done.returncode == 0, f"--- stdout ---\n{done.stdout}\n--- stderr ---\n{done.stderr}"
    assert "worker stopped by SIGTERM, exit status 0" in done.stdout, done.stdout
