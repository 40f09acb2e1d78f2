"""The files one job passes through, traced in a producer and a consumer process
(tests/support/job_path.py; ``python -m tests.support.job_path`` prints them).

docs/architecture.md, "The path of a job", lists them: a new hop on the path of every job shows
up here first.
"""

from __future__ import annotations

from tests.support.job_path import measure, paths


def test_a_job_passes_through_few_files_and_none_that_it_does_not_need() -> None:
    found = paths(measure())
    producer, consumer = found["producer"], found["consumer"]
    # An add encodes and stores: nothing of the engine or of the sources runs for it.
    assert not [f for f in producer if f.startswith(("varmq/engine/", "varmq/sources/"))]
    # A queue without job records, a job that succeeds: the record store and the dead-letter
    # shelf are never called; the handles users hold are not on the consumer's path.
    unneeded = ("adapters/sqliteq/_records.py", "adapters/sqliteq/_dead.py", "varmq/api/")
    assert not [f for f in consumer if f.startswith(unneeded)], consumer
    assert len(producer) <= 11, producer
    assert len(consumer) <= 15, consumer
    # The renewal thread renews leases and refreshes the worker's record in the store
    # (store.workers()); the worker thread takes, runs and acks.
    assert {"varmq/sources/leases.py", "varmq/sources/registration.py"} <= set(found["renewal"])
    assert {"varmq/engine/thread_runner.py", "varmq/sources/storage.py"} <= set(found["worker"])
