"""Getting outcomes back: values with ``result()``, exceptions with ``err()``, groups.

- ``new_result_worker``: ``handle.result()`` gives the value the function returned, or raises
  the exception it raised (like ``concurrent.futures.Future.result``).
- ``new_err_worker``: ``handle.err()`` gives the exception the function raised, or ``None``.
- ``add_all``: one handle for many jobs; ``results()`` yields ``varmq.Result(job_id, data,
  err)`` per job in completion order, ``errs()`` yields the exceptions of an err worker's group.

Run it with::

    python examples/result_worker.py
"""

from __future__ import annotations

import math

import varmq


def square_root(job: varmq.Job[float]) -> float:
    if job.data < 0:
        raise ValueError(f"no real square root of {job.data}")
    return math.sqrt(job.data)


def validate(job: varmq.Job[str]) -> None:
    if "@" not in job.data:
        raise ValueError(f"{job.data!r} is not an e-mail address")


def main() -> None:
    # -- result worker: one job at a time ------------------------------------------------
    roots = varmq.new_result_worker(square_root, 2)
    queue = roots.bind_queue()

    job = queue.add(16.0)
    assert job is not None  # None only when the queue refused the job (closed, full)
    print(f"sqrt(16) = {job.result(timeout=5)}")

    bad = queue.add(-1.0)
    assert bad is not None
    try:
        bad.result(timeout=5)
    except ValueError as exc:
        print(f"sqrt(-1) raised: {exc}")

    # -- result worker: many jobs, one handle -----------------------------------------------
    numbers = [1.0, 4.0, -9.0, 25.0]
    group = queue.add_all([varmq.Item(n, id=f"sqrt({n:g})") for n in numbers])
    outcomes = {r.job_id: r for r in group.results()}  # yielded in completion order
    for n in numbers:
        outcome = outcomes[f"sqrt({n:g})"]
        shown = f"raised {outcome.err!r}" if outcome.err else outcome.data
        print(f"  {outcome.job_id}: {shown}")

    roots.wait()
    m = roots.metrics
    print(f"successful={m.successful} failed={m.failed} completed={m.completed}")
    roots.stop_and_wait()

    # -- err worker: only the error matters --------------------------------------------------
    checker = varmq.new_err_worker(validate, 2)
    addresses = checker.bind_queue()

    ok = addresses.add("ada@example.com")
    assert ok is not None
    print(f"ada@example.com -> err() = {ok.err(timeout=5)}")

    batch = addresses.add_all(["grace@example.com", "linus", "ken@example.com", "barbara"])
    problems = [str(exc) for exc in batch.errs()]  # only the jobs that raised
    print(f"{len(problems)} invalid: {sorted(problems)}")

    # Every job error also reaches the worker's errs() queue (and an error_handler, if set).
    print(f"worker errs() holds {checker.errs().qsize()} exceptions")
    checker.stop_and_wait()


if __name__ == "__main__":
    main()
