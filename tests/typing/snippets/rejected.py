"""Mistakes a type checker must catch. Each line below ends with the error code mypy reports."""

from __future__ import annotations

import varmq


def noop(job: varmq.Job[int]) -> None:
    return None


varmq.new_worker(noop, 4, retyr=3)  # expect: call-arg
varmq.new_worker(noop, 4, poll_interval="1")  # expect: arg-type
varmq.new_result_worker(noop, name=7)  # expect: arg-type
varmq.new_worker(noop, 4, strategy="fastest")  # expect: arg-type
varmq.new_topics().subscribe("orders.#", on_full="wait")  # expect: arg-type
varmq.new_topics().publish("orders", 1, message_id=7)  # expect: arg-type

tasks = varmq.App()


@tasks.task
def send_email(to: str, subject: str) -> bool:
    return True


send_email.enqueue("a@example.com", "hi", "extra")  # expect: call-arg
send_email.enqueue("a@example.com", subject=3)  # expect: arg-type
wrong: str = send_email.enqueue("a@example.com", "hi").result()  # expect: assignment
send_email.using(delay="soon")  # expect: arg-type
