"""The conformance tests of rate limits: ``RateConformance``.

A part of :class:`~varmq.testing.conformance.QueueConformance`; see that module for how to run the
suite. Each test runs when the storage claims :class:`~varmq.contract.protocols.IRateLimited`
(``RATE_EXTENSIONS``). The semantics checked are those of ``varmq.contract.protocols``, "Rate
limits":

- a take hands out no more jobs than the window has left, across every object (process) of
  the queue; the jobs held back are not leased, keep their place and their attempt count;
- the window slides: a start leaves it ``seconds`` after it was made, on the storage's clock;
- a take the limit cut short says how long until the window opens (``throttled_for``);
- ``stats()`` says how full the window is and whether jobs wait on it;
- the option is stored with the queue (``"100/s"``, ``(count, seconds)``), inherited by an
  opener that leaves it out, refused (naming both) to one that gives another, and a bad value
  is refused naming it;
- a worker starts no more jobs than the limit lets it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import varmq
from varmq.contract.protocols import IRateLimited
from varmq.contract.stored_settings import QueueSettingsError
from varmq.testing._suite import WAIT, SuiteBase, bind, fresh_name, put
from varmq.testing.harness import QueueKind, StorageHarness

__all__ = ["RateConformance"]


def _take(q: Any, n: int) -> list[tuple[bytes, str]]:
    return list(q.dequeue_batch_with_ack_ids(n))


class RateConformance(SuiteBase):
    """Tests of a queue's ``rate_limit``."""

    def limited(self, harness: StorageHarness, kind: QueueKind, name: str, **options: Any) -> Any:
        return self.open(harness, kind, name, needs=(IRateLimited,), **options)

    def test_a_take_hands_out_no_more_than_the_window_has_left(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        name = fresh_name()
        q = self.limited(harness, kind, name, rate_limit=(3, 60))
        assert q.rate_limit == (3, 60.0)
        for i in range(5):
            assert put(q, kind, f"job-{i}".encode())
        taken = _take(q, 5)
        assert [item for item, _ in taken] == [b"job-0", b"job-1", b"job-2"]
        assert 0 < q.throttled_for() <= 60
        # Another object of the queue (another process) shares the window.
        other = self.limited(harness, kind, name)
        assert _take(other, 5) == []
        assert 0 < other.throttled_for() <= 60
        stats = other.stats()
        assert (stats["waiting"], stats["in_flight"]) == (2, 3)
        assert stats["rate_window_used"] == 3 and stats["throttled"] is True
        for _, ack_id in taken:
            assert q.acknowledge(ack_id)
        assert _take(q, 5) == []  # ending jobs frees nothing: starts are counted, not runs
        harness.advance(60)
        later = q.dequeue_batch_with_attempts(5)
        assert [(item, attempt) for item, _, attempt in later] == [(b"job-3", 1), (b"job-4", 1)]
        assert q.throttled_for() == 0.0
        assert q.stats()["throttled"] is False

    def test_the_window_slides_each_start_leaving_it_its_length_after(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.limited(harness, kind, fresh_name(), rate_limit="2/10s")
        for i in range(6):
            assert put(q, kind, f"job-{i}".encode())
        assert len(_take(q, 1)) == 1  # t=0
        harness.advance(5)
        assert len(_take(q, 5)) == 1  # t=5: one left in the window
        assert 0 < q.throttled_for() <= 5  # the start at t=0 leaves at t=10
        harness.advance(4.9)
        assert _take(q, 5) == []
        harness.advance(0.1)  # t=10: the first start left the window, the second has not
        assert len(_take(q, 5)) == 1
        assert q.stats()["rate_window_used"] == 2
        harness.advance(5)  # t=15: the start at t=5 left
        assert len(_take(q, 5)) == 1

    def test_a_queue_without_a_limit_is_never_throttled(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.limited(harness, kind, fresh_name())
        assert q.rate_limit is None
        for i in range(50):
            assert put(q, kind, str(i).encode())
        assert len(_take(q, 50)) == 50
        assert q.throttled_for() == 0.0
        assert "throttled" not in q.stats()

    @pytest.mark.parametrize(
        ("given", "count", "seconds"),
        [("100/s", 100, 1.0), ("6000/m", 6000, 60.0), ("1/h", 1, 3600.0), ((5, 0.5), 5, 0.5)],
    )
    def test_the_limit_is_stored_with_the_queue_in_one_form(
        self, harness: StorageHarness, kind: QueueKind, given: Any, count: int, seconds: float
    ) -> None:
        name = fresh_name()
        self.limited(harness, kind, name, rate_limit=given)
        assert self.limited(harness, kind, name).rate_limit == (count, seconds)
        self.limited(harness, kind, name, rate_limit=(count, seconds))  # the same limit: opens
        with pytest.raises(QueueSettingsError, match=r"rate_limit=.* given, but the queue was"):
            self.limited(harness, kind, name, rate_limit=(count + 1, seconds))

    @pytest.mark.parametrize(
        ("bad", "error"),
        [
            ("100", ValueError),
            ("0/s", ValueError),
            ("10/y", ValueError),
            ("ten/s", ValueError),
            ((0, 1.0), ValueError),
            ((5, 0), ValueError),
            ((5, 8 * 86400), ValueError),
            (100, TypeError),
            ((1.5, 1.0), TypeError),
            (True, TypeError),
        ],
    )
    def test_a_bad_limit_is_refused_naming_it(
        self, harness: StorageHarness, kind: QueueKind, bad: Any, error: type[Exception]
    ) -> None:
        with pytest.raises(error, match=r"rate_limit=.*expected \"<count>/<unit>\""):
            self.limited(harness, kind, fresh_name(), rate_limit=bad)

    def test_a_worker_starts_no_more_jobs_than_the_limit_lets_it(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.limited(harness, kind, fresh_name(), rate_limit=(3, 3600))
        started = threading.Semaphore(0)
        ran: list[Any] = []

        def run(job: varmq.Job[Any]) -> None:
            ran.append(job.data)
            started.release()

        worker = varmq.new_worker(run, concurrency=4)
        try:
            handle = bind(worker, q, kind)
            for i in range(8):
                assert handle.add(i)
            for _ in range(3):
                assert started.acquire(timeout=WAIT)
            # No event says "nothing more will start": give it the time a take needs, a few
            # times over, and check that the window held.
            time.sleep(0.3)
            assert sorted(ran) == [0, 1, 2]
            stats = q.stats()
            assert stats["throttled"] is True and stats["waiting"] == 5
        finally:
            worker.stop()
