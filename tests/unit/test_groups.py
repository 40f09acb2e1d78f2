"""Group jobs from add_all: pending count, wait, errs() and results() in completion order."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import varmq

WAIT = 10.0
SHORT = 0.1


class PerJobGate:
    """A job function where each job waits for its own event, named by the job's data."""

    def __init__(self, names: list[str]) -> None:
        self.events = {name: threading.Event() for name in names}
        self._cond = threading.Condition()  # guards started
        self.started: list[str] = []

    def fn(self, job: varmq.Job[str]) -> str:
        with self._cond:
            self.started.append(job.data)
            self._cond.notify_all()
        self.events[job.data].wait(WAIT)
        if job.data.startswith("bad"):
            raise ValueError(job.data)
        return job.data.upper()

    def wait_started(self, n: int) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self.started) >= n, WAIT)

    def open_all(self) -> None:
        for event in self.events.values():
            event.set()


@pytest.fixture
def per_job() -> Any:
    made: list[PerJobGate] = []

    def make(names: list[str]) -> PerJobGate:
        g = PerJobGate(names)
        made.append(g)
        return g

    yield make
    for g in made:
        g.open_all()


@pytest.mark.parametrize("kind", ["new_worker", "new_err_worker", "new_result_worker"])
def test_group_pending_counts_down_to_zero_as_members_finish(kind: str, gate: Any) -> None:
    g = gate()
    worker = getattr(varmq, kind)(g.fn, 2)
    group = worker.bind_queue().add_all(range(5))
    assert group.num_pending() == 5
    assert g.wait_started(2)
    assert group.wait(timeout=SHORT) is False
    assert group.num_pending() == 5
    g.open()
    assert group.wait(timeout=WAIT) is True
    assert group.num_pending() == 0
    assert all(job.is_closed() for job in group.jobs)


def test_group_member_ids_are_not_prefixed() -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False, job_id_generator=lambda: "gen")
    group = worker.bind_queue().add_all([varmq.Item(1, id="x"), 2])
    assert [job.id for job in group.jobs] == ["x", "gen"]


def test_empty_group_is_done_at_once() -> None:
    worker = varmq.new_result_worker(lambda job: None)
    group = worker.bind_queue().add_all([])
    assert group.num_pending() == 0
    assert group.wait(0) is True
    assert list(group.results()) == []


def test_closing_a_member_counts_it_done_and_it_never_runs(recorder: Any) -> None:
    worker = varmq.new_worker(recorder.fn, auto_run=False)
    group = worker.bind_queue().add_all(["a", "b", "c"])
    group.jobs[1].close()
    assert group.num_pending() == 2
    with pytest.raises(varmq.JobAlreadyClosedError):
        group.jobs[1].close()
    assert group.num_pending() == 2, "a second close does not count again"
    worker.start()
    assert group.wait(WAIT)
    assert recorder.ran == ["a", "c"]


def test_closing_a_running_member_raises_job_processing_error(gate: Any) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn)
    group = worker.bind_queue().add_all(["a", "b"])
    assert g.wait_started(1)
    with pytest.raises(varmq.JobProcessingError):
        group.jobs[0].close()
    assert group.num_pending() == 2
    g.open()
    assert group.wait(WAIT)


def test_err_group_yields_only_the_errors_then_ends() -> None:
    def fn(job: varmq.Job[str]) -> None:
        if job.data == "bad":
            raise ValueError("bad item")

    worker = varmq.new_err_worker(fn)
    group = worker.bind_queue().add_all(["ok", "bad", "ok too"])
    errors = list(group.errs())
    assert [str(e) for e in errors] == ["bad item"]
    assert group.num_pending() == 0


def test_err_group_without_failures_yields_nothing() -> None:
    worker = varmq.new_err_worker(lambda job: None)
    group = worker.bind_queue().add_all(range(4))
    assert list(group.errs()) == []


def test_result_group_yields_one_result_per_member_in_completion_order(per_job: Any) -> None:
    g = per_job(["a", "b", "bad-c", "d"])
    worker = varmq.new_result_worker(g.fn, 4, job_id_generator=lambda: "")
    group = worker.bind_queue().add_all([varmq.Item(n, id=f"id-{n}") for n in g.events])
    assert g.wait_started(4)
    results = group.results()
    order = ["d", "bad-c", "a", "b"]
    got = []
    for name in order:
        g.events[name].set()
        got.append(next(results))
    assert next(results, None) is None, "the stream ends after the last member"
    assert [r.job_id for r in got] == ["id-d", "id-bad-c", "id-a", "id-b"]
    assert [r.data for r in got] == ["D", None, "A", "B"]
    assert [type(r.err) for r in got] == [type(None), ValueError, type(None), type(None)]
    assert isinstance(got[0], varmq.Result)


def test_result_group_values_match_the_inputs() -> None:
    worker = varmq.new_result_worker(lambda job: job.data * 10, 3)
    group = worker.bind_priority_queue().add_all([varmq.Item(i, priority=5 - i) for i in range(5)])
    results = list(group.results())
    assert sorted(r.data for r in results) == [0, 10, 20, 30, 40]
    assert all(r.err is None for r in results)


def test_result_group_skips_cancelled_members(recorder: Any) -> None:
    worker = varmq.new_result_worker(recorder.fn, auto_run=False)
    group = worker.bind_queue().add_all(["a", "b", "c"])
    group.jobs[0].close()
    worker.start()
    results = list(group.results())
    assert sorted(r.data for r in results) == ["b", "c"]


def test_group_members_give_their_own_results() -> None:
    worker = varmq.new_result_worker(lambda job: job.data + 1)
    group = worker.bind_queue().add_all([1, 2, 3])
    assert [job.result(WAIT) for job in group.jobs] == [2, 3, 4]
