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
assert_type(
    queue.worker,
    varmq.BaseWorker[dict[str, Any], varmq.EnqueuedJob[dict[str, Any]], varmq.EnqueuedGroupJob],
)
results = varmq.new_result_worker(double)
handle = results.bind_queue().add(21)
if handle is not None:
    assert_type(handle.result(), int)


def on_error(failing: varmq.BaseWorker[Any, Any, Any], exc: BaseException) -> None:
    return None


varmq.new_err_worker(send, error_handler=on_error)
assert_type(varmq.get_worker("typed"), varmq.BaseWorker[Any, Any, Any] | None)

topics = varmq.new_topics(dedup_window=100)
assert_type(topics.publish("orders.eu.created", {"id": 1}, message_id="o-1"), int)
subscription = topics.subscribe("orders.#", max_pending=10, on_full="drop_oldest")
for message in subscription:
    assert_type(message, varmq.Message)
    assert_type(message.name, str)
orders = worker.bind_topic(topics, "orders.*.created", on_full="block", block_timeout=1.0)
assert_type(orders, varmq.TopicQueue[dict[str, Any]])
assert_type(orders.stats()["dropped"], int)
topics.bind("orders.#", queue)
