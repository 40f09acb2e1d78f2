"""Snapshots of in-memory queues: save_queues and load_queues, what survives, what is refused."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import varmq
from tests.unit.conftest import WAIT, Gate, Recorder
from varmq.api import snapshot_format


class CardDeclined(Exception):
    """A module-level exception class, so that a snapshot can name it."""


def drain(queue: varmq.MemoryQueue | varmq.MemoryPriorityQueue) -> list[Any]:
    return [job.data for job in queue.values()]


def load_one(path: Path, name: str) -> Any:
    return varmq.load_queues(path)[name]


def saved(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return {queue["name"]: queue for queue in doc["queues"]}


def run_all(queue: Any, prioritised: bool, **options: Any) -> list[tuple[str, Any, int]]:
    """Bind ``queue`` to a new worker (concurrency 1) and give what it ran, in order."""
    ran: list[tuple[str, Any, int]] = []
    worker = varmq.new_worker(lambda job: ran.append((job.id, job.data, job.attempt)), **options)
    if prioritised:
        worker.with_priority_queue(queue)
    else:
        worker.with_queue(queue)
    assert worker.wait(WAIT)
    worker.stop_and_wait(WAIT)
    return ran


# -- what comes back -------------------------------------------------------------------------


def test_fifo_queue_comes_back_in_order_with_ids_timestamps_and_attempt_counts(
    tmp_path: Path,
) -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    orders = worker.bind_queue(name="orders")
    jobs = [orders.add({"n": n}, job_id=f"o{n}") for n in range(5)]
    orders.add("no id")
    path = tmp_path / "queues.json"
    varmq.save_queues([orders], path)

    loaded = varmq.load_queues(path)
    queue = loaded["orders"]
    assert isinstance(queue, varmq.MemoryQueue)
    assert queue.name == "orders"
    assert drain(queue) == [{"n": n} for n in range(5)] + ["no id"]
    back = queue.values()
    assert [job.id for job in back] == [f"o{n}" for n in range(5)] + [""]
    assert [job._enqueued_at for job in back[:5]] == [job._enqueued_at for job in jobs if job]
    assert all(job.attempt == 1 for job in back)
    assert [row[0] for row in run_all(queue, False)] == [f"o{n}" for n in range(5)] + [""]


def test_priority_queue_comes_back_in_order_keeping_fifo_among_equal_priorities(
    tmp_path: Path,
) -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    urgent = worker.bind_priority_queue(name="urgent")
    added = [(3, "c1"), (1, "a1"), (3, "c2"), (-5, "z"), (1, "a2"), (3, "c3"), (10**30, "far")]
    for priority, data in added:
        urgent.add(data, priority, job_id=data)
    path = tmp_path / "queues.json"
    varmq.save_queues([urgent], path)

    queue = load_one(path, "urgent")
    assert isinstance(queue, varmq.MemoryPriorityQueue)
    expected = ["z", "a1", "a2", "c1", "c2", "c3", "far"]
    assert drain(queue) == expected
    assert [job._priority for job in queue.values()] == [-5, 1, 1, 3, 3, 3, 10**30]
    assert [row[0] for row in run_all(queue, True)] == expected


def test_delayed_jobs_come_back_due_at_the_same_wall_clock_time(tmp_path: Path) -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    queue = worker.bind_priority_queue(name="later")
    queue.add("second", 2, job_id="second", delay=0.6)
    queue.add("first", 9, job_id="first", delay=0.3)
    queue.add("far", 0, job_id="far", delay=3600)
    saved_at = time.time()
    path = tmp_path / "queues.json"
    varmq.save_queues([queue], path)
    delayed = saved(path)["later"]["delayed"]
    assert [record["id"] for record in delayed] == ["first", "second", "far"]
    assert abs(delayed[0]["due_at"] - (saved_at + 0.3)) < 0.2
    assert delayed[0]["priority"] == 9

    loaded = load_one(path, "later")
    assert len(loaded) == 0  # delayed jobs wait beside the queue, not in it
    ran: list[tuple[str, float]] = []
    consumer = varmq.new_worker(lambda job: ran.append((job.id, time.time())))
    consumer.with_priority_queue(loaded)
    assert consumer.queue_stats()[0]["delayed"] == 3
    deadline = time.monotonic() + WAIT
    while len(ran) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)  # letting the delays pass on purpose
    assert [job_id for job_id, _ in ran] == ["first", "second"]
    assert ran[0][1] >= saved_at + 0.3 - 0.05
    assert ran[1][1] >= saved_at + 0.6 - 0.05
    assert consumer.queue_stats()[0]["delayed"] == 1


def test_dead_letters_and_retry_settings_survive(tmp_path: Path) -> None:
    policy = varmq.Retry(
        max_attempts=2,
        backoff=0.01,
        multiplier=3.0,
        max_delay=7.5,
        jitter=False,
        non_retryable=(CardDeclined, KeyError),
    )

    def charge(job: varmq.Job[Any]) -> None:
        raise CardDeclined(f"card {job.data} declined")

    worker = varmq.new_worker(charge, retry=policy, poison_limit=9)
    payments = worker.bind_priority_queue(name="payments")
    payments.add(41, 4, job_id="p41")
    payments.add(42, 4, job_id="p42")
    assert worker.wait(WAIT)
    letters = payments.dead_letters()
    assert [letter.id for letter in letters] == ["p41", "p42"]
    path = tmp_path / "queues.json"
    varmq.save_queues([payments], path)
    worker.stop_and_wait(WAIT)

    queue = load_one(path, "payments")
    assert queue.retry == policy
    assert queue.poison_limit == 9
    consumer = varmq.new_worker(lambda job: None)
    handle = consumer.with_priority_queue(queue, retry=queue.retry)
    back = handle.dead_letters()
    assert [(d.id, d.data, d.attempts, d.error, d.dead_at) for d in back] == [
        (d.id, d.data, d.attempts, d.error, d.dead_at) for d in letters
    ]
    assert back[0].error.startswith("CardDeclined: card 41 declined\n\nTraceback")
    assert back[0].error == letters[0].error
    assert handle.requeue_dead() == 2
    assert consumer.wait(WAIT)
    assert consumer.metrics.successful == 2


def test_retry_policy_of_a_loaded_queue_applies_only_when_passed_back(tmp_path: Path) -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False, retry=varmq.Retry(max_attempts=7))
    queue = worker.bind_queue(name="q", retry=varmq.Retry(max_attempts=2, backoff=0.0))
    queue.add("x")
    path = tmp_path / "queues.json"
    varmq.save_queues([queue], path)
    assert saved(path)["q"]["retry"]["max_attempts"] == 2  # the queue's own, not the worker's

    runs: list[int] = []

    def fail(job: varmq.Job[Any]) -> None:
        runs.append(job.attempt)
        raise RuntimeError("no")

    loaded = load_one(path, "q")
    consumer = varmq.new_worker(fail, retry=varmq.Retry(max_attempts=4, backoff=0.0))
    handle = consumer.with_queue(loaded, retry=loaded.retry)
    assert consumer.wait(WAIT)
    assert runs == [1, 2]
    assert len(handle.dead_letters()) == 1


def test_saving_a_loaded_and_bound_queue_again_gives_the_same_queue(tmp_path: Path) -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    queue = worker.bind_priority_queue(name="again")
    for n in range(20):
        queue.add(n, n % 3, job_id=f"j{n}")
    first = tmp_path / "first.json"
    varmq.save_queues([queue], first)
    rebound = varmq.new_worker(lambda job: None, auto_run=False).with_priority_queue(
        load_one(first, "again")
    )
    second = tmp_path / "second.json"
    varmq.save_queues([rebound], second)
    assert saved(first)["again"]["jobs"] == saved(second)["again"]["jobs"]


# -- jobs taken and not finished -------------------------------------------------------------


@pytest.mark.parametrize("concurrency", [1, 3])
def test_jobs_taken_and_not_finished_are_saved_at_the_front_of_their_priority_band(
    tmp_path: Path, gate: Callable[[], Gate], concurrency: int
) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn, concurrency)
    queue = worker.bind_priority_queue(name="band")
    running = [f"run{n}" for n in range(concurrency)]
    for job_id in running:
        queue.add(job_id, 5, job_id=job_id)
    assert g.wait_started(concurrency)
    queue.add("late5", 5, job_id="late5")
    queue.add("urgent", 1, job_id="urgent")
    queue.add("low", 9, job_id="low")
    path = tmp_path / "queues.json"
    varmq.save_queues([queue], path)
    g.open()
    assert worker.wait(WAIT)

    loaded = load_one(path, "band")
    ran = run_all(loaded, True)
    assert [job_id for job_id, _, _ in ran] == ["urgent", *running, "late5", "low"]
    assert all(attempt == 1 for _, _, attempt in ran)  # the interrupted run does not count


@pytest.mark.parametrize("kind", ["thread", "async"])
def test_unfinished_jobs_go_back_to_the_front_of_a_fifo_queue_and_run_again(
    tmp_path: Path, gate: Callable[[], Gate], kind: str
) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn if kind == "thread" else g.afn, 2)
    queue = worker.bind_queue(name="fifo")
    queue.add("a", job_id="a")
    queue.add("b", job_id="b")
    assert g.wait_started(2)
    queue.add("c", job_id="c")
    path = tmp_path / "queues.json"
    varmq.save_queues([queue], path)
    g.open()
    assert worker.wait(WAIT)

    ran = run_all(load_one(path, "fifo"), False)
    assert sorted(job_id for job_id, _, _ in ran[:2]) == ["a", "b"]
    assert ran[2][0] == "c"


def test_a_job_waiting_out_a_retry_is_saved_as_delayed_with_its_attempts(
    tmp_path: Path, poll: Callable[..., bool]
) -> None:
    def fail(job: varmq.Job[Any]) -> None:
        raise RuntimeError("first run fails")

    policy = varmq.Retry(max_attempts=3, backoff=3600.0, max_delay=3600.0, jitter=False)
    worker = varmq.new_worker(fail, retry=policy)
    queue = worker.bind_queue(name="retry")
    queue.add("x", job_id="x")
    assert poll(lambda: worker.metrics.retried == 1)  # the metrics have no wait of their own
    path = tmp_path / "queues.json"
    varmq.save_queues([queue], path)
    record = saved(path)["retry"]
    assert record["jobs"] == []
    [delayed] = record["delayed"]
    assert (delayed["id"], delayed["attempts"]) == ("x", 1)
    assert delayed["due_at"] > time.time() + 3500


def test_cancelled_and_finished_jobs_are_left_out(tmp_path: Path, recorder: Recorder) -> None:
    worker = varmq.new_worker(recorder.fn, auto_run=False)
    queue = worker.bind_queue(name="q")
    keep = queue.add("keep", job_id="keep")
    cancel = queue.add("cancel", job_id="cancel")
    assert keep is not None and cancel is not None
    cancel.close()
    path = tmp_path / "queues.json"
    varmq.save_queues([queue], path)
    assert [job["id"] for job in saved(path)["q"]["jobs"]] == ["keep"]


@pytest.mark.parametrize("window", ["as is", "widened"])
@pytest.mark.parametrize("kind", ["fifo", "priority"])
def test_saving_while_the_worker_runs_saves_each_unfinished_job_exactly_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window: str, kind: str
) -> None:
    """A producer adds, four threads take (lock-free), some runs fail and are retried; every
    snapshot taken meanwhile holds each job once, and every job added before it started and
    not finished when it ended. "widened": each take pauses between its dequeue and its
    claim, where a snapshot that did not wait for it would lose the job."""
    storage_class = varmq.MemoryQueue if kind == "fifo" else varmq.MemoryPriorityQueue
    if window == "widened":
        plain_dequeue = storage_class.dequeue

        def slow_dequeue(self: Any) -> Any:
            item = plain_dequeue(self)
            if item is not None:
                time.sleep(0.0002)
            return item

        monkeypatch.setattr(storage_class, "dequeue", slow_dequeue)
    done: set[str] = set()
    done_lock = threading.Lock()

    def work(job: varmq.Job[Any]) -> None:
        if job.data % 7 == 0 and job.attempt == 1:
            raise RuntimeError("retried")
        with done_lock:
            done.add(job.id)

    worker = varmq.new_worker(work, 4, retry=varmq.Retry(max_attempts=3, backoff=0.001))
    # One queue on the worker: its threads take lock-free.
    if kind == "fifo":
        queue: Any = worker.bind_queue(name="busy")
    else:
        queue = worker.bind_priority_queue(name="busy")
    added: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        n = 0
        while not stop.is_set():
            if len(queue) > 2_000:  # keep the backlog small: the end must drain within WAIT
                time.sleep(0.001)
                continue
            for _ in range(50):
                added.append(f"j{n}")
                if kind == "fifo":
                    queue.add(n, job_id=f"j{n}")
                else:
                    queue.add(n, n % 3, job_id=f"j{n}")
                n += 1
            time.sleep(0.0005)

    producer = threading.Thread(target=produce, name="test:producer")
    producer.start()
    try:
        for attempt in range(40):
            with done_lock:
                finished_before = set(done)
            added_before = set(added)
            path = tmp_path / f"s{attempt}.json"
            varmq.save_queues([queue], path)
            with done_lock:
                finished_after = set(done)
            record = saved(path)["busy"]
            ids = [job["id"] for job in record["jobs"] + record["delayed"]]
            assert len(ids) == len(set(ids))
            missing = added_before - finished_after - set(ids)
            assert not missing, f"snapshot {attempt} lost {sorted(missing)[:5]}"
            assert not (set(ids) & finished_before), "a job finished before the save was saved"
            assert set(ids) <= set(added)
    finally:
        stop.set()
        producer.join(WAIT)
    assert worker.wait(WAIT)


@pytest.mark.parametrize("records", [False, True], ids=["plain", "keep_results"])
def test_saves_while_threads_add_jobs_never_fail_and_each_file_is_a_consistent_cut(
    tmp_path: Path, records: bool
) -> None:
    """Three threads add jobs, with and without ids, some delayed, to a FIFO and a priority
    queue (each the only queue of its running worker, so its threads take without the lock;
    with ``keep_results`` every add with an id also goes through the queue's job records);
    some runs fail once and wait out a retry. Meanwhile this thread saves both queues again
    and again, with thread switches forced every 10 µs. No save raises, and every file loads
    and is a cut of each queue: no id twice, only jobs that were added, none that had closed
    before the save began, every job with an id added before it and still open after it."""
    options: dict[str, Any] = {"keep_results": 60} if records else {}
    retry = varmq.Retry(max_attempts=3, backoff=0.002, jitter=False)

    def work(job: varmq.Job[Any]) -> None:
        if job.data % 7 == 0 and job.attempt == 1:
            raise RuntimeError("retried")

    fifo = varmq.new_worker(work, 2, retry=retry).bind_queue(name="fifo", **options)
    urgent = varmq.new_worker(work, 2, retry=retry).bind_priority_queue(name="urgent", **options)
    queues: dict[str, Any] = {"fifo": fifo, "urgent": urgent}
    added: dict[str, list[str]] = {name: [] for name in queues}
    counts = [dict.fromkeys(queues, 0) for _ in range(3)]  # per producer thread
    # Jobs with an id not known to be closed yet; only this thread removes from it. Copies
    # are taken under open_lock: copying a dict another thread grows can raise mid-copy.
    open_jobs: dict[tuple[str, str], varmq.EnqueuedJob[Any]] = {}
    open_lock = threading.Lock()
    stop = threading.Event()
    failures: list[BaseException] = []

    def produce(thread: int) -> None:
        n = 0
        try:
            while not stop.is_set():
                for name, queue in queues.items():
                    if len(queue) > 1_000:  # a small backlog: each save stays short
                        continue
                    job_id = f"t{thread}-{n}" if n % 2 else None
                    delay = 0.003 if n % 11 == 0 else None
                    counts[thread][name] += 1  # before: a save may find the job at once
                    if job_id is not None:
                        added[name].append(job_id)
                    if name == "fifo":
                        job = queue.add(n, job_id=job_id, delay=delay)
                    else:
                        job = queue.add(n, n % 4, job_id=job_id, delay=delay)
                    assert job is not None
                    if job_id is not None:
                        with open_lock:
                            open_jobs[name, job_id] = job
                n += 1
                if n % 20 == 0:
                    time.sleep(0.0002)  # let the workers keep up
        except BaseException as exc:  # seen by the test thread
            failures.append(exc)

    closed_before: dict[str, set[str]] = {name: set() for name in queues}
    producers = [
        threading.Thread(target=produce, args=(t,), name=f"test:producer-{t}") for t in range(3)
    ]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often: a race shows up sooner
    saves = 0
    try:
        for producer in producers:
            producer.start()
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline or saves < 10:
            with open_lock:
                tracked = list(open_jobs.items())
            for key, job in tracked:
                if job.is_closed():
                    closed_before[key[0]].add(key[1])
                    with open_lock:
                        del open_jobs[key]
            with open_lock:
                keys = list(open_jobs)  # one step: the producers add to it meanwhile
            still_open = {name: {key[1] for key in keys if key[0] == name} for name in queues}
            path = tmp_path / f"s{saves % 3}.json"
            varmq.save_queues([fifo, urgent], path)
            added_after = {name: set(ids) for name, ids in added.items()}
            counts_after = {name: sum(c[name] for c in counts) for name in queues}
            open_after = {
                name: {job_id for job_id in ids if not open_jobs[name, job_id].is_closed()}
                for name, ids in still_open.items()
            }
            loaded = varmq.load_queues(path)
            assert list(loaded) == ["fifo", "urgent"]
            for name, record in saved(path).items():
                entries = record["jobs"] + record["delayed"]
                assert len(entries) <= counts_after[name]
                ids = [entry["id"] for entry in entries if entry["id"]]
                assert len(ids) == len(set(ids)), f"save {saves}: a job twice in {name}"
                assert set(ids) <= added_after[name]
                assert not set(ids) & closed_before[name], f"save {saves}: closed jobs saved"
                missing = open_after[name] - set(ids)
                assert not missing, f"save {saves} lost {sorted(missing)[:5]} of {name}"
                assert len(loaded[name]) == len(record["jobs"])
            saves += 1
    finally:
        stop.set()
        for producer in producers:
            producer.join(WAIT)
        sys.setswitchinterval(interval)
    assert not failures, failures
    assert fifo.worker.wait(WAIT) and urgent.worker.wait(WAIT)


# -- refused files ---------------------------------------------------------------------------


def good_snapshot(tmp_path: Path) -> Path:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    one = worker.bind_queue(name="one")
    two = worker.bind_priority_queue(name="two")
    one.add("a", job_id="a")
    one.add("b", job_id="b")
    two.add("c", 1, job_id="c")
    path = tmp_path / "good.json"
    varmq.save_queues([one, two], path)
    return path


def duplicate_queue(doc: dict[str, Any]) -> None:
    doc["queues"][1]["name"] = "one"


def duplicate_job(doc: dict[str, Any]) -> None:
    doc["queues"][0]["jobs"][1]["id"] = "a"


def duplicate_delayed(doc: dict[str, Any]) -> None:
    doc["queues"][0]["delayed"].append(dict(doc["queues"][0]["jobs"][0], due_at=time.time()))


DAMAGED: dict[str, tuple[Callable[[bytes, Path], bytes], str]] = {
    "truncated": (lambda raw, _: raw[: len(raw) // 2], "truncated"),
    "cut after the last bracket": (lambda raw, _: raw.rstrip()[:-1], "truncated"),
    "garbage": (lambda raw, _: b"\x00\x8f\xff not json", "not UTF-8"),
    "not json": (lambda raw, _: b"queues: [one, two]\n", "not valid JSON"),
    "empty": (lambda raw, _: b"", "empty"),
    "another program's json": (
        lambda raw, _: b'{"name": "my-app", "version": "1.0.0", "queues": []}',
        "not a varmq snapshot",
    ),
    "a json list": (lambda raw, _: b"[1, 2, 3]", "not a varmq snapshot"),
    "unknown version": (
        lambda raw, p: raw.replace(b'"version":1', b'"version":2', 1),
        "format version 2",
    ),
    "nan in data": (lambda raw, _: raw.replace(b'"data":"a"', b'"data":NaN', 1), "NaN"),
}
EDITED: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "two queues with one name": (duplicate_queue, "queue 'one': two queues have this name"),
    "two jobs with one id": (duplicate_job, "queue 'one', job 'a': two jobs"),
    "a waiting and a delayed job with one id": (duplicate_delayed, "queue 'one', job 'a'"),
    "a job without its attempts": (
        lambda doc: doc["queues"][0]["jobs"][0].pop("attempts"),
        "queue 'one', job 'a': \"attempts\" is missing",
    ),
    "a boolean priority": (
        lambda doc: doc["queues"][1]["jobs"][0].update(priority=True),
        "queue 'two', job 'c': \"priority\" is True",
    ),
    "an unknown kind": (
        lambda doc: doc["queues"][1].update(kind="lifo"),
        "queue 'two': its kind is 'lifo'",
    ),
    "an exception that is not loaded": (
        lambda doc: doc["queues"][0].update(
            retry={
                "max_attempts": 3,
                "backoff": 1,
                "multiplier": 2,
                "max_delay": 9,
                "jitter": False,
                "non_retryable": ["no_such_module_here:Oops"],
            }
        ),
        "import no_such_module_here first",
    ),
}


def edited(change: Callable[[dict[str, Any]], None]) -> Callable[[bytes, Path], bytes]:
    """A damage that edits the document and writes it back as JSON."""

    def apply(raw: bytes, _: Path) -> bytes:
        doc = json.loads(raw)
        change(doc)
        return json.dumps(doc).encode()

    return apply


REFUSED = {**DAMAGED, **{name: (edited(change), text) for name, (change, text) in EDITED.items()}}


@pytest.mark.parametrize("damage", list(REFUSED), ids=list(REFUSED))
def test_a_damaged_foreign_or_duplicate_laden_file_is_refused_named_and_left_untouched(
    tmp_path: Path, damage: str
) -> None:
    path = good_snapshot(tmp_path)
    change, expected = REFUSED[damage]
    raw = change(path.read_bytes(), path)
    path.write_bytes(raw)
    with pytest.raises(varmq.PersistenceError, match="refusing to load it") as refused:
        varmq.load_queues(path)
    assert str(path) in str(refused.value)
    assert expected in str(refused.value)
    assert refused.value.path == str(path)
    assert path.read_bytes() == raw


def test_jobs_without_an_id_may_repeat(tmp_path: Path) -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    queue = worker.bind_queue(name="anon")
    queue.add("x")
    queue.add("x")
    path = tmp_path / "queues.json"
    varmq.save_queues([queue], path)
    assert drain(load_one(path, "anon")) == ["x", "x"]


def test_a_missing_file_raises_file_not_found_unless_missing_ok(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.json"
    with pytest.raises(FileNotFoundError, match="missing_ok=True") as missing:
        varmq.load_queues(path)
    assert missing.value.filename == str(path)
    assert varmq.load_queues(path, missing_ok=True) == {}
    assert not path.exists()


# -- refused saves ---------------------------------------------------------------------------


def old_file(tmp_path: Path) -> tuple[Path, bytes]:
    path = good_snapshot(tmp_path)
    return path, path.read_bytes()


def assert_untouched(path: Path, before: bytes) -> None:
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_a_giant_priority_refuses_the_save_and_leaves_the_old_file(tmp_path: Path) -> None:
    path, before = old_file(tmp_path)
    worker = varmq.new_worker(lambda job: None)
    queue = worker.bind_priority_queue(name="giant", capacity=0)
    worker.pause()
    queue.add("huge", 10**5000, job_id="huge")
    with pytest.raises(varmq.PersistenceError) as refused:
        varmq.save_queues([queue], path)
    message = str(refused.value)
    assert str(path) in message and "'giant'" in message and "'huge'" in message
    assert "4,300 digits" in message and "nothing was written" in message
    assert_untouched(path, before)
    worker.resume()
    assert worker.wait(WAIT)
    assert worker.metrics.successful == 1  # the queue itself takes any whole number


def test_priority_of_4300_digits_is_saved_and_loaded(tmp_path: Path) -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    queue = worker.bind_priority_queue(name="big")
    queue.add("big", 10**4299, job_id="big")
    path = tmp_path / "queues.json"
    varmq.save_queues([queue], path)
    assert load_one(path, "big").values()[0]._priority == 10**4299


def test_two_handles_with_one_name_refuse_the_save(tmp_path: Path) -> None:
    path, before = old_file(tmp_path)
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    first = worker.bind_queue(name="same")
    second = varmq.new_worker(lambda job: None, auto_run=False).bind_priority_queue(name="same")
    with pytest.raises(varmq.PersistenceError, match="queue 'same': two queues have this name"):
        varmq.save_queues([first, second], path)
    assert_untouched(path, before)


@pytest.mark.parametrize("kind", ["fifo", "priority"])
def test_two_adds_with_one_id_make_one_job_and_the_save_works(tmp_path: Path, kind: str) -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    queue: Any = (
        worker.bind_queue(name="q") if kind == "fifo" else worker.bind_priority_queue(name="q")
    )
    first = queue.add("first", job_id="x")
    assert queue.add("second", job_id="x") is first  # already in the queue: nothing added
    assert queue.add("later", job_id="x", delay=60) is first
    late = queue.add("late", job_id="y", delay=60)
    assert queue.add("now", job_id="y") is late
    path = tmp_path / "queues.json"
    varmq.save_queues([queue], path)
    record = saved(path)["q"]
    assert [(job["id"], job["data"]) for job in record["jobs"]] == [("x", "first")]
    assert [(job["id"], job["data"]) for job in record["delayed"]] == [("y", "late")]
    assert drain(load_one(path, "q")) == ["first"]


def test_a_loaded_job_holds_its_id_once_bound(tmp_path: Path) -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    queue = worker.bind_queue(name="q")
    queue.add("waiting", job_id="x")
    queue.add("delayed", job_id="y", delay=60)
    path = tmp_path / "queues.json"
    varmq.save_queues([queue], path)
    loaded = load_one(path, "q")
    [waiting] = loaded.values()
    again = varmq.new_worker(lambda job: None, auto_run=False).with_queue(loaded)
    assert again.add("again", job_id="x") is waiting
    assert again.add("again", job_id="y").data == "delayed"
    varmq.save_queues([again], path)
    assert [job["id"] for job in saved(path)["q"]["jobs"]] == ["x"]


def test_two_jobs_with_one_id_put_in_the_storage_directly_refuse_the_save(
    tmp_path: Path,
) -> None:
    """The handles never store a second job with an id the queue holds; a job put straight
    into the storage bypasses them, and the save still refuses to write a file the loader
    would refuse."""
    path, before = old_file(tmp_path)
    storage = varmq.MemoryQueue(name="twice")
    queue = varmq.new_worker(lambda job: None, auto_run=False).with_queue(storage)
    queue.add(1, job_id="x")
    storage.enqueue(varmq.EnqueuedJob("x", 2))
    with pytest.raises(varmq.PersistenceError, match="queue 'twice', job 'x'"):
        varmq.save_queues([queue], path)
    assert_untouched(path, before)


@pytest.mark.parametrize(
    "data",
    [object(), {1, 2}, float("nan"), b"bytes", {"deep": 10**5000}],
    ids=["object", "set", "nan", "bytes", "giant int"],
)
def test_data_that_is_not_json_refuses_the_save_naming_queue_and_job(
    tmp_path: Path, data: Any
) -> None:
    path, before = old_file(tmp_path)
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    queue = worker.bind_queue(name="bad")
    queue.add("fine", job_id="fine")
    queue.add(data, job_id="culprit")
    with pytest.raises(varmq.PersistenceError) as refused:
        varmq.save_queues([queue], path)
    assert "queue 'bad', job 'culprit': its data cannot be saved as JSON" in str(refused.value)
    assert refused.value.queue == "bad" and refused.value.job_id == "culprit"
    assert_untouched(path, before)


def test_a_job_without_an_id_is_named_by_its_place(tmp_path: Path) -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    queue = worker.bind_queue(name="bad")
    queue.add("fine")
    queue.add(object())
    with pytest.raises(varmq.PersistenceError, match=r"the job without an id at jobs\[1\]"):
        varmq.save_queues([queue], tmp_path / "queues.json")


def test_strings_that_utf8_cannot_hold_are_saved_escaped(tmp_path: Path) -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    queue = worker.bind_queue(name="text")
    queue.add("caf\u00e9 \ud800", job_id="lone surrogate")
    path = tmp_path / "queues.json"
    varmq.save_queues([queue], path)
    assert drain(load_one(path, "text")) == ["caf\u00e9 \ud800"]


def test_a_retry_policy_the_loader_could_not_rebuild_refuses_the_save(tmp_path: Path) -> None:
    class Local(Exception):
        pass

    worker = varmq.new_worker(lambda job: None, auto_run=False)
    local = worker.bind_queue(name="local", retry=varmq.Retry(non_retryable=(Local,)))
    endless = worker.bind_queue(name="endless", retry=varmq.Retry(max_delay=float("inf")))
    with pytest.raises(varmq.PersistenceError, match=r"queue 'local': .*cannot be found"):
        varmq.save_queues([local], tmp_path / "queues.json")
    with pytest.raises(varmq.PersistenceError, match=r"queue 'endless': .*max_delay=inf"):
        varmq.save_queues([endless], tmp_path / "queues.json")
    assert list(tmp_path.iterdir()) == []


def test_save_refuses_storage_handles_and_a_bare_handle(tmp_path: Path) -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    queue = worker.bind_queue(name="q")
    with pytest.raises(TypeError, match=r"\[queue\]"):
        varmq.save_queues(queue, tmp_path / "x.json")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="durable already"):
        varmq.save_queues([object()], tmp_path / "x.json")  # type: ignore[list-item]


# -- the file --------------------------------------------------------------------------------


def test_the_file_is_readable_json_with_its_format_and_version_first(tmp_path: Path) -> None:
    path = good_snapshot(tmp_path)
    text = path.read_text(encoding="utf-8")
    assert text.startswith('{"format":"varmq-snapshot","version":1,')
    assert len(text.splitlines()) >= 9  # one job per line
    doc = json.loads(text)
    one = doc["queues"][0]
    assert (one["name"], one["kind"], one["retry"], one["poison_limit"]) == ("one", "fifo", None, 5)
    assert list(one["jobs"][0]) == ["id", "priority", "enqueued_at", "attempts", "data"]
    assert doc["queues"][1]["kind"] == "priority"


def test_a_save_replaces_the_file_and_keeps_its_permissions(tmp_path: Path) -> None:
    path = good_snapshot(tmp_path)
    os.chmod(path, 0o640)
    inode = path.stat().st_ino
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    queue = worker.bind_queue(name="new")
    queue.add("n")
    varmq.save_queues([queue], path)
    assert list(varmq.load_queues(path)) == ["new"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert path.stat().st_ino != inode  # a new file moved over the old one
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, before = old_file(tmp_path)

    def no_space(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    queue = worker.bind_queue(name="new")
    with pytest.raises(OSError, match="No space"):
        varmq.save_queues([queue], path)
    assert_untouched(path, before)


def queue_holding(name: str, data: Any) -> Any:
    queue = varmq.new_worker(lambda job: None, auto_run=False).bind_queue(name=name)
    queue.add(data, job_id=name)
    return queue


def test_a_save_through_a_symlink_writes_its_target_and_keeps_the_link(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    target = data / "queues.json"
    link = tmp_path / "current.json"
    link.symlink_to(Path("data") / "queues.json")  # relative, and dangling until the first save
    chain = tmp_path / "chain.json"
    chain.symlink_to(link)
    varmq.save_queues([queue_holding("first", 1)], link)
    assert link.is_symlink() and os.readlink(link) == os.path.join("data", "queues.json")
    assert list(varmq.load_queues(target)) == ["first"]
    os.chmod(target, 0o640)
    varmq.save_queues([queue_holding("second", 2)], link)
    assert link.is_symlink() and list(varmq.load_queues(target)) == ["second"]
    varmq.save_queues([queue_holding("third", 3)], chain)
    assert chain.is_symlink() and link.is_symlink()
    assert list(varmq.load_queues(chain)) == ["third"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the target's, kept
    assert sorted(p.name for p in data.iterdir()) == ["queues.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chain.json", "current.json", "data"]


def temporary_name(path: Path, pid: int) -> str:
    """The name a save of ``path`` by process ``pid`` writes its new file under."""
    return f".{path.name}.{pid}.{os.urandom(4).hex()}.tmp"


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


# Files beside the snapshot that are not temporary files of its saves: never removed.
NOT_OURS = [
    ".queues.json.tmp",
    ".queues.json.1.zzzzzzzz.tmp",
    ".queues.json.1.0123abcd.tmp.bak",
    ".other.json.1.0123abcd.tmp",
    "queues.json.1.0123abcd.tmp",
]


def test_temporary_files_of_crashed_saves_are_removed_by_the_next_save_and_by_a_load(
    tmp_path: Path,
) -> None:
    path = tmp_path / "queues.json"
    dead = dead_pid()
    for name in NOT_OURS:
        (tmp_path / name).write_bytes(b"not ours")

    def crash() -> None:
        # Two of a dead process, and one of this process's pid that no save of it writes
        # now: left by an earlier process that had the same pid (a restarted container).
        for pid in (dead, dead, os.getpid()):
            (tmp_path / temporary_name(path, pid)).write_bytes(b'{"format":"varmq-snap')

    def left() -> list[str]:
        return sorted(p.name for p in tmp_path.iterdir())

    crash()
    varmq.save_queues([queue_holding("saved", 1)], path)
    assert left() == sorted([*NOT_OURS, "queues.json"])
    crash()
    assert list(varmq.load_queues(path)) == ["saved"]
    assert left() == sorted([*NOT_OURS, "queues.json"])
    path.unlink()
    crash()  # a crash in the very first save
    assert varmq.load_queues(path, missing_ok=True) == {}
    assert left() == sorted(NOT_OURS)


def test_the_temporary_file_of_a_save_running_in_another_process_is_kept(
    tmp_path: Path,
) -> None:
    path = tmp_path / "queues.json"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        running = tmp_path / temporary_name(path, sleeper.pid)
        running.write_bytes(b"being written")
        varmq.save_queues([queue_holding("saved", 1)], path)
        assert varmq.load_queues(path)
        assert running.read_bytes() == b"being written"
        # Untouched for more than an hour: its pid was reused by a process that is not saving.
        hours_ago = time.time() - 7200
        os.utime(running, (hours_ago, hours_ago))
        varmq.save_queues([queue_holding("saved", 1)], path)
        assert not running.exists()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_save_and_a_load_keep_the_temporary_file_of_a_save_running_in_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "queues.json"
    writing, go_on = threading.Event(), threading.Event()
    plain_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        if threading.current_thread().name == "test:slow-save" and not writing.is_set():
            writing.set()  # its temporary file is written: hold the save here
            go_on.wait(WAIT)
        plain_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    slow = threading.Thread(
        target=varmq.save_queues,
        args=([queue_holding("slow", 1)], path),
        name="test:slow-save",
    )
    slow.start()
    try:
        assert writing.wait(WAIT)
        [temporary] = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
        varmq.save_queues([queue_holding("fast", 2)], path)
        assert list(varmq.load_queues(path)) == ["fast"]
        assert temporary.exists()
    finally:
        go_on.set()
        slow.join(WAIT)
    assert list(varmq.load_queues(path)) == ["slow"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["queues.json"]


def test_the_digit_limit_is_the_one_python_reads_by_default() -> None:
    default = getattr(sys.int_info, "default_max_str_digits", 4300)
    assert default == snapshot_format.MAX_DIGITS
