"""The conformance tests of worker records: ``WorkerRecordConformance``.

A part of :class:`~varmq.testing.conformance.QueueConformance`; see that module for how to run the
suite. Each test runs when the storage's queues claim
:class:`~varmq.contract.protocols.IHasWorkerRegistry` (``WORKER_EXTENSIONS``). The semantics
checked are those of ``varmq.contract.protocols``, "Workers seen from anywhere":

- a registered record is listed by the store (``store.workers()``, through any object of it)
  with the worker's fields and the store's times, as alive;
- a registration again refreshes ``last_seen`` and the counts, and keeps ``started_at``;
- a record not refreshed within its expiry shows its worker as gone, never alive, and is
  dropped an hour (``GONE_KEPT``) later; ``remove_worker`` ends it at once;
- a worker bound to a queue of the store registers when it starts and removes its record when
  it stops.

Stores are shared (a Redis server serves many tests): every test looks only at the ids it made.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import varmq
from varmq.contract.protocols import IHasWorkerRegistry, IWorkerRegistry
from varmq.contract.workers import GONE_KEPT, encode_worker
from varmq.testing._suite import WAIT, SuiteBase, bind, kinds
from varmq.testing.harness import QueueKind, StorageHarness

__all__ = ["WorkerRecordConformance"]

_FIFO = (QueueKind(False, False),)


def _record(worker_id: str, *, completed: int = 0, queues: tuple[str, ...] = ("q",)) -> bytes:
    return encode_worker(
        worker_id=worker_id,
        name="mailer",
        host="host-a",
        pid=4321,
        queues=queues,
        concurrency=8,
        running=2,
        completed=completed,
        failed=1,
    )


def _find(store: Any, worker_id: str) -> varmq.WorkerInfo | None:
    found = [info for info in store.workers() if info.id == worker_id]
    assert len(found) <= 1, found
    return found[0] if found else None


class WorkerRecordConformance(SuiteBase):
    """Tests of the records of workers a store keeps (``IWorkerRegistry``)."""

    def registry(self, harness: StorageHarness, kind: QueueKind) -> IWorkerRegistry:
        q = self.open(harness, kind, needs=(IHasWorkerRegistry,))
        assert isinstance(q, IHasWorkerRegistry)
        registry = q.worker_registry
        assert isinstance(registry, IWorkerRegistry)
        return registry

    @kinds(_FIFO)
    def test_a_registered_worker_is_listed_alive_with_its_fields_by_every_object_of_the_store(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        registry = self.registry(harness, kind)
        worker_id = uuid.uuid4().hex
        registry.register_worker(worker_id, _record(worker_id, queues=("a", "b")), 60.0)
        info = _find(self.store(harness), worker_id)  # another object of the store
        assert info is not None
        assert (info.name, info.host, info.pid, info.queues) == (
            "mailer",
            "host-a",
            4321,
            ("a", "b"),
        )
        assert (info.concurrency, info.running, info.completed, info.failed) == (8, 2, 0, 1)
        assert info.alive is True
        assert info.started_at == info.last_seen
        assert abs(info.last_seen - time.time()) < 3600  # Unix seconds on the store's clock
        listed = [r for r in registry.worker_records() if r["id"] == worker_id]
        assert [r["alive"] for r in listed] == [True]

    @kinds(_FIFO)
    def test_a_registration_again_refreshes_last_seen_and_counts_and_keeps_started_at(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        registry = self.registry(harness, kind)
        worker_id = uuid.uuid4().hex
        registry.register_worker(worker_id, _record(worker_id), 60.0)
        first = _find(self.store(harness), worker_id)
        harness.advance(1.0)
        registry.register_worker(worker_id, _record(worker_id, completed=7), 60.0)
        again = _find(self.store(harness), worker_id)
        assert first is not None and again is not None
        assert again.started_at == first.started_at
        assert again.last_seen >= first.last_seen + 0.9
        assert again.completed == 7
        assert again.alive

    @kinds(_FIFO)
    def test_a_record_not_refreshed_within_its_expiry_shows_the_worker_gone_then_is_dropped(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        registry = self.registry(harness, kind)
        store = self.store(harness)
        gone_id, living_id = uuid.uuid4().hex, uuid.uuid4().hex
        registry.register_worker(gone_id, _record(gone_id), 0.5)
        registry.register_worker(living_id, _record(living_id), 60.0)
        harness.advance(0.6)
        gone, living = _find(store, gone_id), _find(store, living_id)
        assert gone is not None and gone.alive is False
        assert living is not None and living.alive is True
        ours = [w.id for w in store.workers() if w.id in (gone_id, living_id)]
        assert ours == [living_id, gone_id]  # living workers first
        harness.advance(GONE_KEPT + 1)
        registry.register_worker(living_id, _record(living_id), 60.0)  # a write prunes too
        assert _find(store, gone_id) is None
        assert _find(store, living_id) is not None

    @kinds(_FIFO)
    def test_remove_worker_ends_the_record_at_once_and_says_whether_there_was_one(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        registry = self.registry(harness, kind)
        worker_id = uuid.uuid4().hex
        registry.register_worker(worker_id, _record(worker_id), 60.0)
        assert registry.remove_worker(worker_id) is True
        assert _find(self.store(harness), worker_id) is None
        assert registry.remove_worker(worker_id) is False
        assert registry.remove_worker(uuid.uuid4().hex) is False

    @kinds(_FIFO)
    def test_a_record_of_unreadable_bytes_is_left_out_of_the_listing(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        registry = self.registry(harness, kind)
        worker_id = uuid.uuid4().hex
        registry.register_worker(worker_id, b"\xff not json", 60.0)
        assert [r["record"] for r in registry.worker_records() if r["id"] == worker_id] == [
            b"\xff not json"
        ]
        assert _find(self.store(harness), worker_id) is None

    def test_a_running_worker_registers_in_the_store_and_a_clean_stop_removes_it(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IHasWorkerRegistry,))
        store = self.store(harness)
        worker = varmq.new_worker(lambda job: None, 3, name=f"records-{uuid.uuid4().hex[:8]}")
        bind(worker, q, kind)
        try:
            deadline = time.monotonic() + WAIT
            mine: list[varmq.WorkerInfo] = []
            while not mine and time.monotonic() < deadline:
                mine = [w for w in store.workers() if w.name == worker.name]
                time.sleep(0.01)
            assert len(mine) == 1, "the worker did not register within WAIT seconds"
            info = mine[0]
            assert info.alive and info.queues == (q.name,) and info.concurrency == 3
            assert info.pid == os.getpid()
        finally:
            assert worker.stop_and_wait(WAIT)
        assert [w for w in store.workers() if w.name == worker.name] == []
