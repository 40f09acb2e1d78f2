"""Code a user writes: every line must type-check under mypy --strict."""

from __future__ import annotations

from typing import Any

from typing_extensions import assert_type

import varmq


def send(job: varmq.Job[dict[str, Any]]) -> None:
    return None


def double(job: varmq.Job[int]) -> int:
    return job.data * 2


worker = varmq.new_worker(send, 4, name="typed", retry=varmq.Retry(max_attempts=3), prefetch=8)
assert_type(worker, varmq.Worker[dict[str, Any]])
with varmq.new_worker(send, 4, auto_run=False) as same:
    assert_type(same, varmq.Worker[dict[str, Any]])
queue = worker.bind_queue()
assert_type(queue.worker, varmq.Worker[dict[str, Any]])  # the worker that bound it, its own type
bound: varmq.BaseWorker[
    dict[str, Any], varmq.EnqueuedJob[dict[str, Any]], varmq.EnqueuedGroupJob
] = queue.worker
annotated: varmq.Queue[
    dict[str, Any], varmq.EnqueuedJob[dict[str, Any]], varmq.EnqueuedGroupJob
] = queue  # the worker's type may be left out
results = varmq.new_result_worker(double)
handle = results.bind_queue().add(21)
if handle is not None:
    assert_type(handle.result(), int)


def on_error(failing: varmq.BaseWorker[Any, Any, Any], exc: BaseException) -> None:
    return None


varmq.new_err_worker(send, error_handler=on_error)
assert_type(varmq.get_worker("typed"), varmq.BaseWorker[Any, Any, Any] | None)


varmq.save_queues([queue, worker.bind_priority_queue(name="urgent")], "queues.json")
loaded = varmq.load_queues("queues.json", missing_ok=True)
assert_type(loaded, dict[str, varmq.MemoryQueue | varmq.MemoryPriorityQueue])
emails = loaded.get("emails", varmq.MemoryQueue(name="emails"))
if isinstance(emails, varmq.MemoryQueue):
    assert_type(emails.retry, varmq.Retry | None)
    worker.with_queue(emails, retry=emails.retry)
records = results.bind_queue(keep_results=60)
record = records.job("job-1")
assert_type(record, varmq.JobRecord | None)
if record is not None and record.error is not None:
    assert_type(record.error, varmq.JobError)
assert_type(records.cancel("job-1"), bool)
tick = worker.schedule("tick", every=60, data={"n": 1}, queue=queue)
assert_type(tick, varmq.Schedule)
topics = varmq.new_topics(dedup_window=100)
assert_type(topics.publish("orders.eu.created", {"id": 1}, message_id="o-1"), int)
subscription = topics.subscribe("orders.#", max_pending=10, on_full="drop_oldest")
for message in subscription:
    assert_type(message, varmq.Message)
    assert_type(message.name, str)
orders = worker.bind_topic(topics, "orders.*.created", on_full="block", block_timeout=1.0)
assert_type(orders, varmq.TopicQueue[dict[str, Any], varmq.Worker[dict[str, Any]]])
assert_type(orders.worker, varmq.Worker[dict[str, Any]])
assert_type(orders.stats()["dropped"], int)
topics.bind("orders.#", queue)

app = varmq.App(None, default_queue="emails")


@app.task
def send_email(to: str, subject: str, *, urgent: bool = False) -> int:
    return len(subject)


@app.task(queue="billing", retry=varmq.Retry(max_attempts=3), timeout=30)
async def charge(customer: int, amount: float) -> dict[str, float]:
    return {"charged": amount}


assert_type(send_email("a@example.com", "hi"), int)
run = send_email.enqueue("a@example.com", "hi", urgent=True)
assert_type(run, varmq.TaskRun[int])
assert_type(run.result(timeout=5), int)
assert_type(run.status(), varmq.JobRecord)
assert_type(run.cancel(), bool)
assert_type(
    send_email.using(delay=10, job_id="w-1").enqueue("b@example.com", "yo"), varmq.TaskRun[int]
)
charged = charge.enqueue(7, 9.5)
assert_type(charged.result(), dict[str, float])
by_name = app.enqueue("billing.refund", args=[42], kwargs={"reason": "late"}, queue="billing")
assert_type(by_name, varmq.TaskRun[Any])


async def produce() -> float:
    later = await charge.enqueue_async(1, 2.0)
    return (await later.result_async())["charged"]
