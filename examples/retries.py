"""Retries with backoff, a delayed job and the dead-letter shelf, on an in-memory queue.

A flaky function fails twice before it succeeds: the worker retries it with exponential
backoff. A job that keeps failing ends on the queue's dead letters, where it can be listed
and requeued. A delayed job waits for its time. Run: ``python examples/retries.py``.
"""

from __future__ import annotations

import time

import varmq

failures: dict[str, int] = {}


def charge(job: varmq.Job[str]) -> str:
    seen = failures.get(job.data, 0)
    failures[job.data] = seen + 1
    if job.data == "flaky" and seen < 2:
        raise ConnectionError(f"payment service busy (attempt {job.attempt})")
    if job.data == "broken":
        raise ConnectionError("card declined, every time")
    return f"{job.data} charged on attempt {job.attempt}"


def main() -> None:
    policy = varmq.Retry(max_attempts=3, backoff=0.05, multiplier=2.0, jitter=False)
    worker = varmq.new_result_worker(charge, 2, retry=policy)
    queue = worker.bind_queue(name="payments")

    flaky = queue.add("flaky")
    broken = queue.add("broken")
    later = queue.add("later", delay=0.2)
    assert flaky is not None and broken is not None and later is not None
    started = time.monotonic()

    print(flaky.result(timeout=5))
    print("broken:", repr(broken.err(timeout=5)))
    print(
        later.result(timeout=5),
        f"(added with delay=0.2, ran after {time.monotonic() - started:.2f} s)",
    )

    worker.wait()
    for letter in queue.dead_letters():
        print(f"dead letter {letter.key}: {letter.data!r}, {letter.attempts} attempts")
        print(f"  last error: {letter.error}")
    m = worker.metrics
    print(f"successful={m.successful} failed={m.failed} retried={m.retried}")
    print(f"dead_lettered={m.dead_lettered}")
    worker.stop_and_wait()


if __name__ == "__main__":
    main()
