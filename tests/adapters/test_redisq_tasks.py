"""Tasks on redisq: two apps on one Redis share calls, typed results and dead letters."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

import varmq

if TYPE_CHECKING:
    from tests.adapters.conftest import Backend

WAIT = 10.0


@pytest.fixture
def workers() -> Iterator[list[Any]]:
    """Workers the test started, stopped (and waited for) before its stores close."""
    started: list[Any] = []
    yield started
    for worker in started:
        worker.stop()
        assert worker.wait_until_stopped(WAIT)


@dataclasses.dataclass(frozen=True)
class Shipment:
    order: uuid.UUID
    ships_on: dt.date


def _declare(app: varmq.App) -> Any:
    @app.task(name="shipping.plan", queue="shipping")
    def plan(order: uuid.UUID, placed: dt.datetime) -> Shipment:
        return Shipment(order, (placed + dt.timedelta(days=2)).date())

    return plan


def test_a_call_made_by_one_app_runs_on_another_and_its_result_is_typed(
    backend: Backend, workers: list[Any]
) -> None:
    producer, consumer = varmq.App(backend.queues()), varmq.App(backend.queues())
    plan = _declare(producer)
    _declare(consumer)
    order = uuid.uuid4()
    run = plan.enqueue(order, dt.datetime(2026, 3, 1, 9, 30, tzinfo=dt.timezone.utc))
    assert run.status().state == "queued"
    workers.append(consumer.worker("shipping", concurrency=2))
    assert run.result(WAIT) == Shipment(order, dt.date(2026, 3, 3))
    assert plan.run_of(run.id).status().state == "succeeded"


def test_a_call_no_worker_knows_goes_to_the_dead_letters_naming_the_task(
    backend: Backend, workers: list[Any]
) -> None:
    producer, consumer = varmq.App(backend.queues()), varmq.App(backend.queues())
    _declare(consumer)
    run = producer.enqueue("shipping.cancel", args=["o-1"], queue="shipping")
    workers.append(consumer.worker("shipping"))
    with pytest.raises(varmq.JobFailedError) as caught:
        run.result(WAIT)
    assert (caught.value.state, caught.value.error_type) == ("dead", "UnknownTaskError")
    letters = consumer._queue("shipping").handle().dead_letters()
    assert [("shipping.cancel" in letter.error) for letter in letters] == [True]
