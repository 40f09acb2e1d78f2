"""One message to many consumers, in memory: a live subscription, a worker subscribed to a
pattern, a queue bound to a topic, and a slow subscriber that drops instead of slowing anyone.

- ``audit`` iterates a subscription to ``orders.#`` (every order event) on a thread of its own;
- the ``billing`` worker is subscribed to ``orders.*.created`` with ``bind_topic``: each
  matching message is a job, retried with its retry policy;
- ``emails`` is an ordinary queue of another worker, bound to ``orders.eu.*``: copies wait in
  it like any job (this is how a durable subscriber is made on a storage queue);
- ``dashboard`` never reads, with ``on_full="drop_oldest"``: it keeps the last 3 messages and
  counts the rest as dropped, while the publisher and the others go on at full speed.

Publishing the same ``message_id`` twice makes no second copy. Run it with::

    python examples/topics.py
"""

from __future__ import annotations

import threading
from typing import Any

import varmq


def main() -> None:
    topics = varmq.new_topics()

    audit_log: list[str] = []
    audit = topics.subscribe("orders.#", name="audit")
    reader = threading.Thread(
        target=lambda: audit_log.extend(message.name for message in audit), name="audit"
    )
    reader.start()

    billed: list[tuple[str, Any]] = []

    def bill(job: varmq.Job[dict[str, Any]]) -> None:
        assert isinstance(job, varmq.TopicJob)
        billed.append((job.topic, job.data["order"]))

    billing = varmq.new_worker(bill, 2, name="billing", retry=varmq.Retry(max_attempts=3))
    billing.bind_topic(topics, "orders.*.created", name="billing")

    emailed: list[str] = []
    mailer = varmq.new_worker(lambda job: emailed.append(job.id), 1, name="mailer")
    topics.bind("orders.eu.*", mailer.bind_queue(name="emails"))

    dashboard = topics.subscribe("orders.#", max_pending=3, on_full="drop_oldest", name="dashboard")

    events = [
        ("orders.eu.created", 1),
        ("orders.us.created", 2),
        ("orders.eu.shipped", 1),
        ("orders.eu.created", 3),
        ("orders.us.cancelled", 2),
    ]
    for name, order in events:
        copies = topics.publish(name, {"order": order}, message_id=f"{name}/{order}")
        print(f"{name:<20} -> {copies} copies")
    again = topics.publish("orders.eu.created", {"order": 1}, message_id="orders.eu.created/1")
    print(f"the same message id again -> {again} copies")

    billing.wait()
    mailer.wait()
    audit.unsubscribe()
    reader.join()
    print("audit saw:", audit_log)
    print("billing ran:", sorted(billed))
    print("emails queued:", sorted(emailed))
    kept = [message.data["order"] for message in iter(lambda: dashboard.get(0), None)]
    print(f"dashboard kept {kept} and dropped {dashboard.dropped}")
    for row in topics.stats():
        print(
            f"  {row['name']:<16} {row['pattern']:<18} received {row['received']}, "
            f"taken {row['taken']}, dropped {row['dropped']}"
        )

    assert len(audit_log) == 5 and again == 0
    assert sorted(billed) == [
        ("orders.eu.created", 1),
        ("orders.eu.created", 3),
        ("orders.us.created", 2),
    ]
    assert sorted(emailed) == [
        "orders.eu.created/1@emails",
        "orders.eu.created/3@emails",
        "orders.eu.shipped/1@emails",
    ]
    assert kept == [1, 3, 2] and dashboard.dropped == 2
    billing.stop_and_wait()
    mailer.stop_and_wait()


if __name__ == "__main__":
    main()
