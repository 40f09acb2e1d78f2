"""A worker made before os.fork() is refused in the child with a clear error, not silently dead."""

from __future__ import annotations

import os

import pytest

import varmq

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")


def _in_child(body: object) -> int:
    """Run ``body()`` in a forked child; its exit status (0: it returned True)."""
    pid = os.fork()
    if pid == 0:  # the child: touch nothing but what is tested, then leave at once
        try:
            code = 0 if body() else 3  # type: ignore[operator]
        except BaseException:
            code = 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_worker_created_before_fork_raises_forked_worker_error_in_the_child() -> None:
    worker = varmq.new_worker(lambda job: None, name="made-before-fork")
    queue = worker.bind_queue()

    def refused() -> bool:
        calls = [lambda: queue.add(1), worker.stop, worker.pause, lambda: worker.wait(0.1)]
        for call in calls:
            try:
                call()
            except varmq.ForkedWorkerError as exc:
                if "made-before-fork" not in str(exc) or "after the fork" not in str(exc):
                    return False
            else:
                return False
        return True

    assert _in_child(refused) == 0
    job = queue.add(2)  # the parent's worker is untouched
    assert job is not None and job.wait(5.0)
    worker.stop_and_wait(5.0)


def test_a_worker_created_in_the_child_works_there() -> None:
    def works() -> bool:
        child = varmq.new_result_worker(lambda job: job.data * 2)
        job = child.bind_queue().add(21)
        ok = job is not None and job.result(5.0) == 42
        child.stop_and_wait(5.0)
        return ok

    assert _in_child(works) == 0
