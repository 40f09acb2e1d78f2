"""The tasks app ``tests/acceptance/test_tasks_processes.py`` runs with ``varmq worker``, and its
producer process.

Configured through the environment, as a deployed service is: ``VARMQ_TASKS_STORE``
(``sqlite:PATH`` or a ``redis://`` URL) and ``VARMQ_TASKS_PREFIX`` (the start of its queue
names, so that every test has queues of its own on the session's Redis)::

    VARMQ_TASKS_STORE=sqlite:/tmp/jobs.db VARMQ_TASKS_PREFIX=t1- \\
        python -m varmq worker tests.acceptance.task_app:app --concurrency 4

``app`` is made on first access (a module ``__getattr__``), so the test process imports this
module for its tasks and helpers without those variables and makes its own :class:`TaskApp`
for each store. The tasks:

- ``price_order(order, placed, ref, *, discount)`` on ``PREFIXmain``: a dataclass holding a
  ``Decimal`` and an ``Enum``, a ``datetime`` and a ``UUID`` in, a dataclass with a ``date``
  out; it checks that every argument arrived rebuilt (a ``TypeError`` otherwise);
- ``tally(words, on, level)``, ``async def``, on ``PREFIXaside`` (the queue's only task, so a
  worker of that queue alone runs it on its event loop);
- ``flaky(marker, n)``, with its own ``retry=``: its first attempt creates the file ``marker``
  and fails, the next one returns ``2 * n``;
- ``nap(seconds, tag, log)``: sleeps, appending ``start TAG PID`` and ``done TAG PID`` to the
  file ``log`` (one ``os.write`` each, so lines stay whole across processes).

``varmq.current_job()`` (progress) did not exist when this was written, so no task reports
progress.

The producer (``python -m tests.acceptance.task_app produce STORE PREFIX COUNT MARKERS``)
enqueues COUNT calls, ``KINDS[n % len(KINDS)]`` for call ``n``: by task object, and by name
through an app that registers no task (as code that cannot import the functions would), and
prints one JSON line per call, ``{"n", "kind", "id"}``, then ``produced``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import os
import sys
import time
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID

import varmq
from tests.acceptance.actors import open_store

__all__ = [
    "KINDS",
    "Level",
    "Order",
    "Receipt",
    "Tally",
    "TaskApp",
    "expected_price",
    "expected_tally",
    "flaky",
    "nap",
    "price_order",
    "tally",
]

KINDS = ("price", "price-by-name", "tally", "tally-by-name", "flaky")
"""What call ``n`` of the producer is: ``KINDS[n % len(KINDS)]``."""
FLAKY_RETRY = varmq.Retry(max_attempts=3, backoff=0.05, jitter=False)


class Level(enum.Enum):
    LOW = "low"
    HIGH = "high"


@dataclasses.dataclass(frozen=True)
class Order:
    sku: str
    quantity: int
    unit_price: Decimal
    level: Level


@dataclasses.dataclass(frozen=True)
class Receipt:
    sku: str
    total: Decimal
    placed: datetime
    due: date
    ref: UUID
    level: Level
    pid: int


@dataclasses.dataclass(frozen=True)
class Tally:
    on: date
    letters: int
    level: Level
    pid: int


def _require(value: object, kind: type, what: str) -> None:
    if not isinstance(value, kind):
        raise TypeError(f"{what} arrived as {type(value).__name__}, not {kind.__name__}")


# -- the tasks' functions (registered on each TaskApp) ------------------------------------------


def price_order(
    order: Order, placed: datetime, ref: UUID, *, discount: Decimal = Decimal("0")
) -> Receipt:
    """The receipt of ``order``: each argument must have been rebuilt to its annotated type."""
    _require(order, Order, "order")
    _require(order.unit_price, Decimal, "order.unit_price")
    _require(order.level, Level, "order.level")
    _require(placed, datetime, "placed")
    _require(ref, UUID, "ref")
    _require(discount, Decimal, "discount")
    if placed.tzinfo is None:
        raise TypeError("placed lost its time zone")
    total = order.unit_price * order.quantity - discount
    due = (placed + timedelta(days=30)).date()
    return Receipt(order.sku, total, placed, due, ref, order.level, os.getpid())


async def tally(words: list[str], on: date, level: Level = Level.LOW) -> Tally:
    """The letters in ``words``, on the worker's event loop."""
    _require(on, date, "on")
    _require(level, Level, "level")
    await asyncio.sleep(0)
    return Tally(on, sum(len(w) for w in words), level, os.getpid())


def flaky(marker: str, n: int) -> int:
    """Fails the first time it runs for ``marker`` (a file it creates), then gives ``2 * n``."""
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return 2 * n
    os.close(fd)
    raise RuntimeError(f"the first attempt for {marker} fails on purpose")


def nap(seconds: float, tag: str, log: str) -> str:
    """Sleeps ``seconds``, logging its start and end to ``log``; gives ``tag``."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"start {tag} {os.getpid()}\n".encode())
        time.sleep(seconds)
        os.write(fd, f"done {tag} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    return tag


class TaskApp:
    """An App over the store ``store_url`` with the tasks above, queues named ``prefix...``."""

    def __init__(self, store_url: str, prefix: str) -> None:
        self.store = open_store(store_url)
        self.main_queue = f"{prefix}main"
        self.aside_queue = f"{prefix}aside"
        self.app = varmq.App(self.store, default_queue=self.main_queue)
        self.price_order = self.app.task(price_order)
        self.tally = self.app.task(queue=self.aside_queue)(tally)
        self.flaky = self.app.task(retry=FLAKY_RETRY)(flaky)
        self.nap = self.app.task(nap)

    def close(self) -> None:
        self.store.close()


# -- the calls the producer makes and the answers they should give ------------------------------


def order_call(n: int) -> tuple[Order, datetime, UUID, Decimal]:
    order = Order(f"sku-{n}", n % 7 + 1, Decimal("1.25") + Decimal(n) / 100, Level.HIGH)
    if n % 2:
        order = dataclasses.replace(order, level=Level.LOW)
    placed = datetime(2024, 2, 28, 12, 0, tzinfo=timezone(timedelta(hours=2))) + timedelta(hours=n)
    return order, placed, UUID(int=n + 1), Decimal(n % 3) / 10


def expected_price(n: int) -> tuple[Any, ...]:
    """``price_order``'s receipt for call ``n`` but its ``pid``, as a tuple."""
    order, placed, ref, discount = order_call(n)
    total = order.unit_price * order.quantity - discount
    due = (placed + timedelta(days=30)).date()
    return (order.sku, total, placed, due, ref, order.level)


def tally_call(n: int) -> tuple[list[str], date, Level]:
    return [f"w{n}", "x" * (n % 4)], date(2024, 1, 1) + timedelta(days=n), list(Level)[n % 2]


def expected_tally(n: int) -> tuple[Any, ...]:
    """``tally``'s answer for call ``n`` but its ``pid``, as a tuple."""
    words, on, level = tally_call(n)
    return (on, sum(len(w) for w in words), level)


def produce(store_url: str, prefix: str, count: int, markers: str) -> None:
    tasks = TaskApp(store_url, prefix)
    # By name, as code that cannot import the functions: an app that registers no task.
    by_name = varmq.App(tasks.store, default_queue=tasks.main_queue)
    price_name, tally_name = tasks.price_order.name, tasks.tally.name
    for n in range(count):
        kind = KINDS[n % len(KINDS)]
        order, placed, ref, discount = order_call(n)
        words, on, level = tally_call(n)
        run: varmq.TaskRun[Any]
        if kind == "price":
            run = tasks.price_order.enqueue(order, placed, ref, discount=discount)
        elif kind == "price-by-name":
            run = by_name.enqueue(
                price_name, args=[order, placed, ref], kwargs={"discount": discount}
            )
        elif kind == "tally":
            run = tasks.tally.enqueue(words, on, level=level)
        elif kind == "tally-by-name":
            run = by_name.enqueue(tally_name, args=[words, on, level], queue=tasks.aside_queue)
        else:
            run = tasks.flaky.enqueue(os.path.join(markers, f"flaky-{n}"), n)
        sys.stdout.write(json.dumps({"n": n, "kind": kind, "id": run.id}) + "\n")
    sys.stdout.write("produced\n")
    sys.stdout.flush()
    tasks.close()


_app: TaskApp | None = None


def __getattr__(name: str) -> Any:
    """``app``: the App over ``VARMQ_TASKS_STORE``, made on first access."""
    global _app
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if _app is None:
        _app = TaskApp(os.environ["VARMQ_TASKS_STORE"], os.environ.get("VARMQ_TASKS_PREFIX", ""))
    return _app.app


def main(argv: list[str]) -> None:
    if len(argv) != 5 or argv[0] != "produce":
        raise SystemExit(
            "usage: python -m tests.acceptance.task_app produce STORE PREFIX COUNT MARKERS"
        )
    produce(argv[1], argv[2], int(argv[3]), argv[4])


if __name__ == "__main__":
    # Through the module's own name: the tasks' names are those the workers register.
    from tests.acceptance import task_app

    task_app.main(sys.argv[1:])
