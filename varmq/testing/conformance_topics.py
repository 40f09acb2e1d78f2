"""The conformance tests of a store's topics: bindings in the storage, copies stored once, and
live subscribers (``TopicConformance``).

A part of :class:`varmq.testing.conformance.QueueConformance`; see that module for how to run the
suite. The store (``harness.queues()``) offers ``topics()``, implementing ``IStorageTopics`` and,
for live subscribers, ``ILiveTopics`` ("Topics" in ``varmq.contract.protocols``). Every call to
``harness.queues()`` may return another store object, as another process would have: a binding made
through one must be honoured by all. Bindings outlive a test in storage, so every test uses topic
words of its own (``fresh_word``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import varmq
from varmq.contract import envelope, observe
from varmq.contract.protocols import (
    DEFAULT_TOPIC_DEDUP_TTL,
    ILiveSubscription,
    ILiveTopics,
    IStorageTopics,
)
from varmq.contract.topic_names import check_name, check_pattern, copy_id, matches
from varmq.testing._suite import (
    DISTRIBUTED_KINDS,
    TOPIC_EXTENSIONS,
    WAIT,
    SuiteBase,
    drain,
    fresh_name,
    fresh_word,
    kinds,
)
from varmq.testing.harness import QueueKind, StorageHarness

__all__ = ["TopicConformance"]

FIFO = QueueKind(False, False)


def _envelopes(q: Any) -> list[envelope.Envelope]:
    """Take (and acknowledge) every job waiting in ``q``, decoded."""
    return [envelope.decode(item) for item in drain(q)]


def _eventually(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


class _Observer:
    """An observer (varmq.contract.observe) that hands every publish ``carrier`` and records
    how each ended."""

    def __init__(self, carrier: dict[str, str]) -> None:
        self.carrier = carrier
        self.ended: list[tuple[str, str | None, bool]] = []

    def send(self, destination: str, operation: str, job_id: str | None) -> Any:
        observer = self

        class Send:
            carrier = observer.carrier

            def end(self, job_id: str | None, error: BaseException | None, stored: bool) -> None:
                assert error is None, error
                observer.ended.append((destination, job_id, stored))

        assert operation == "publish"
        return Send()

    def process(self, destination: str, job: Any, carrier: Any) -> None:
        return None


class TopicConformance(SuiteBase):
    """``topics()`` of the store: publish, bind, unbind, bindings, and live subscribers."""

    def topics(self, harness: StorageHarness, **options: Any) -> Any:
        """The topics of a store of the harness (``options``: of ``topics()``); skip unless
        the storage claims them."""
        self.require(IStorageTopics)
        return self.store(harness).topics(**options)

    def live(self, harness: StorageHarness) -> Any:
        """Topics with live subscribers; skip unless the storage claims them."""
        self.require(IStorageTopics, ILiveTopics)
        return self.store(harness).topics()

    def test_the_store_topics_implement_the_topic_protocols_claimed(
        self, harness: StorageHarness
    ) -> None:
        topics = self.topics(harness)
        for protocol in TOPIC_EXTENSIONS:
            if protocol in self.extensions:
                assert isinstance(topics, protocol), (
                    f"topics() does not implement {protocol.__name__}; implement it, or leave "
                    f"it out of {type(self).__name__}.extensions"
                )

    # -- publishing into bound queues ---------------------------------------------------------

    def test_publish_stores_one_copy_in_each_bound_queue_whose_pattern_matches(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        topics = self.topics(harness)
        word, created, every = fresh_word(), fresh_name(), fresh_name()
        created_q = self.open(harness, kind, created)
        every_q = self.open(harness, kind, every)
        assert topics.bind(f"{word}.*.created", created)
        assert topics.bind(f"{word}.#", every)
        assert topics.publish(f"{word}.eu.created", {"n": 1}) == 2
        assert topics.publish(f"{word}.eu.cancelled", {"n": 2}) == 1
        assert topics.publish(f"{word}", {"n": 3}) == 1
        assert topics.publish(f"other{word}.eu.created", {"n": 4}) == 0
        assert [e.data for e in _envelopes(created_q)] == [{"n": 1}]
        got = _envelopes(every_q)
        assert [e.data for e in got] == [{"n": 1}, {"n": 2}, {"n": 3}]
        assert all(e.id for e in got) and len({e.id for e in got}) == 3

    @pytest.mark.parametrize("message_id", [None, "traced-1"])
    def test_an_observed_publish_stores_its_trace_context_with_every_copy(
        self, harness: StorageHarness, message_id: str | None
    ) -> None:
        topics = self.topics(harness)
        word, first, second = fresh_word(), fresh_name(), fresh_name()
        queues = [self.open(harness, FIFO, name) for name in (first, second)]
        assert topics.bind(f"{word}.#", first)
        assert topics.bind(f"{word}.#", second)
        carrier = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
        observer = _Observer(carrier)
        observe.install(observer)
        try:
            assert topics.publish(f"{word}.created", {"n": 1}, message_id=message_id) == 2
        finally:
            observe.uninstall(observer)
        assert observer.ended == [(f"{word}.created", message_id, True)]
        for q in queues:
            [copy] = _envelopes(q)
            assert copy.data == {"n": 1}
            assert copy.trace == carrier
        assert topics.publish(f"{word}.created", {"n": 2}) == 2
        assert [e.trace for q in queues for e in _envelopes(q)] == [None, None]

    def test_every_store_object_honours_the_bindings_made_through_another(
        self, harness: StorageHarness
    ) -> None:
        word, name = fresh_word(), fresh_name()
        q = self.open(harness, FIFO, name)
        assert self.topics(harness).bind(f"{word}.#", name)
        elsewhere = self.topics(harness)
        assert (f"{word}.#", name) in elsewhere.bindings()
        assert elsewhere.publish(f"{word}.x", "from elsewhere") == 1
        assert [e.data for e in _envelopes(q)] == ["from elsewhere"]

    def test_bind_and_unbind_say_whether_they_changed_anything(
        self, harness: StorageHarness
    ) -> None:
        topics = self.topics(harness)
        word, a, b = fresh_word(), fresh_name(), fresh_name()
        assert topics.bind(f"{word}.#", b) is True
        assert topics.bind(f"{word}.#", b) is False
        assert topics.bind(f"{word}.#", a) is True
        assert topics.bind(f"{word}.*", a) is True
        ours = [pair for pair in topics.bindings() if pair[0].startswith(word)]
        assert ours == sorted([(f"{word}.#", a), (f"{word}.#", b), (f"{word}.*", a)])
        assert topics.unbind(f"{word}.#", b) is True
        assert topics.unbind(f"{word}.#", b) is False
        assert topics.publish(f"{word}.x", 1) == 1  # into a, once, though two patterns match
        ours = [pair for pair in topics.bindings() if pair[0].startswith(word)]
        assert ours == sorted([(f"{word}.#", a), (f"{word}.*", a)])

    def test_a_published_message_id_is_kept_a_day_whoever_consumed_its_copies(
        self, harness: StorageHarness
    ) -> None:
        word, first, second = fresh_word(), fresh_name(), fresh_name()
        mid = f"m-{word}"  # message ids are one namespace per store: unique to this test
        first_q = self.open(harness, FIFO, first)
        second_q = self.open(harness, FIFO, second)
        topics = self.topics(harness)
        topics.bind(f"{word}.#", first)
        topics.bind(f"{word}.#", second)
        assert topics.publish(f"{word}.x", "once", message_id=mid) == 2
        # The reply was lost: another process publishes it again.
        assert self.topics(harness).publish(f"{word}.x", "once", message_id=mid) == 0
        assert [(e.id, e.data) for e in _envelopes(first_q)] == [(copy_id(mid, first), "once")]
        # The copy in `first` was consumed; the id is still kept: a publish a moment later, or
        # almost a day later (the default window is at least a day), by any process, stores
        # nothing.
        assert self.topics(harness).publish(f"{word}.x", "once", message_id=mid) == 0
        harness.advance(86_400 - 60)
        assert topics.publish(f"{word}.x", "once", message_id=mid) == 0
        assert _envelopes(first_q) == []
        # Past the window the id is forgotten: a new publish stores it where it is not stored.
        harness.advance(DEFAULT_TOPIC_DEDUP_TTL)
        assert topics.publish(f"{word}.x", "again", message_id=mid) == 1
        assert [(e.id, e.data) for e in _envelopes(first_q)] == [(copy_id(mid, first), "again")]
        assert [e.id for e in _envelopes(second_q)] == [copy_id(mid, second)]

    def test_with_dedup_ttl_0_a_message_id_dedups_only_while_its_copies_are_stored(
        self, harness: StorageHarness
    ) -> None:
        word, first = fresh_word(), fresh_name()
        mid = f"m-{word}"
        first_q = self.open(harness, FIFO, first)
        topics = self.topics(harness, dedup_ttl=0)
        topics.bind(f"{word}.#", first)
        assert topics.publish(f"{word}.x", "once", message_id=mid) == 1
        assert topics.publish(f"{word}.x", "once", message_id=mid) == 0  # its copy is stored
        assert len(_envelopes(first_q)) == 1
        assert topics.publish(f"{word}.x", "once", message_id=mid) == 1  # consumed: again

    @pytest.mark.parametrize(
        ("bad", "error"), [(-1, ValueError), (float("nan"), ValueError), ("60", TypeError)]
    )
    def test_a_bad_dedup_ttl_is_refused_naming_it(
        self, harness: StorageHarness, bad: Any, error: type[Exception]
    ) -> None:
        with pytest.raises(error, match=r"dedup_ttl="):
            self.topics(harness, dedup_ttl=bad)

    def test_without_a_message_id_every_publish_stores_a_copy_with_an_id_of_its_own(
        self, harness: StorageHarness
    ) -> None:
        word, name = fresh_word(), fresh_name()
        q = self.open(harness, FIFO, name)
        topics = self.topics(harness)
        topics.bind(word, name)
        assert topics.publish(word, "same") == 1
        assert topics.publish(word, "same") == 1
        got = _envelopes(q)
        assert [e.data for e in got] == ["same", "same"] and got[0].id != got[1].id

    def test_a_copy_for_a_queue_never_opened_makes_it_a_fifo_queue(
        self, harness: StorageHarness
    ) -> None:
        word, name = fresh_word(), fresh_name()
        topics = self.topics(harness)
        assert topics.bind(f"{word}.#", name)
        assert (
            topics.publish(f"{word}.early", "waits for its consumer", message_id=f"e-{word}") == 1
        )
        assert (name, "fifo") in self.store(harness).list_queues()
        q = self.open(harness, FIFO, name)
        assert [e.data for e in _envelopes(q)] == ["waits for its consumer"]

    @kinds(DISTRIBUTED_KINDS)
    def test_a_copy_is_announced_to_the_subscribers_of_its_queue(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        word, name = fresh_word(), fresh_name()
        q = self.open(harness, kind, name)
        announced = threading.Event()
        q.subscribe(lambda action: announced.set() if action == "enqueued" else None)
        topics = self.topics(harness)
        topics.bind(word, name)
        assert topics.publish(word, "hello") == 1
        assert announced.wait(WAIT), "the copy was not announced as an add"

    def test_a_worker_on_a_bound_queue_runs_every_published_message_once(
        self, harness: StorageHarness
    ) -> None:
        word, name = fresh_word(), fresh_name()
        topics = self.topics(harness)
        topics.bind(f"{word}.#", name)
        seen: list[Any] = []
        lock = threading.Lock()

        def record(job: varmq.Job[Any]) -> None:
            with lock:
                seen.append(job.data)

        worker = varmq.new_worker(record, 4, poll_interval=0.05)
        try:
            worker.with_distributed_queue(self.open(harness, QueueKind(False, True), name))
            for i in range(200):
                assert topics.publish(f"{word}.{i % 3}", i, message_id=f"m-{word}-{i}") == 1
            _eventually(lambda: len(seen) >= 200, "the worker did not run every copy")
            assert worker.wait(WAIT)
        finally:
            worker.stop_and_wait(timeout=WAIT)
        assert sorted(seen) == list(range(200))

    # -- checks ------------------------------------------------------------------------------

    @pytest.mark.parametrize("name", ["", "a..b", "a.*", "a.b#", 5, None], ids=repr)
    def test_a_bad_name_raises_value_error(self, harness: StorageHarness, name: Any) -> None:
        topics = self.topics(harness)
        with pytest.raises(ValueError, match="topic name"):
            topics.publish(name, 1)

    @pytest.mark.parametrize("pattern", ["", "a..#", "a.b#", "a.*b", 5], ids=repr)
    def test_a_bad_pattern_raises_value_error(self, harness: StorageHarness, pattern: Any) -> None:
        topics = self.topics(harness)
        with pytest.raises(ValueError, match="topic pattern"):
            topics.bind(pattern, fresh_name())
        with pytest.raises(ValueError, match="topic pattern"):
            topics.unbind(pattern, fresh_name())

    def test_bad_queue_names_message_ids_and_data_are_refused_before_anything_is_stored(
        self, harness: StorageHarness
    ) -> None:
        word, name = fresh_word(), fresh_name()
        q = self.open(harness, FIFO, name)
        topics = self.topics(harness)
        with pytest.raises(TypeError, match="queue name"):
            topics.bind(word, 5)
        topics.bind(word, name)
        with pytest.raises(TypeError, match="message_id"):
            topics.publish(word, 1, message_id=5)
        with pytest.raises(TypeError, match="JSON"):
            topics.publish(word, object())
        with pytest.raises(TypeError, match="JSON"):
            topics.publish(word, float("nan"))
        with pytest.raises(TypeError, match="not valid Unicode"):
            topics.publish(word, "lone \ud800")  # stored, it would never decode
        assert len(q) == 0

    def test_every_topic_call_raises_during_an_outage_and_works_after_it(
        self, harness: StorageHarness
    ) -> None:
        topics = self.topics(harness)
        outage = getattr(harness, "outage", None)
        if outage is None:
            pytest.skip("the harness cannot take the storage away (no outage)")
        word, name = fresh_word(), fresh_name()
        q = self.open(harness, FIFO, name)
        topics.bind(word, name)
        calls: list[Callable[[], object]] = [
            lambda: topics.publish(word, "lost?"),
            lambda: topics.bind(f"{word}.x", name),
        ]
        for call in calls:
            # One outage a call: a harness's outage may be short, and a cluster client's call
            # waits out several timeouts before it raises.
            with outage(), pytest.raises(Exception) as caught:
                call()
            assert not isinstance(caught.value, TypeError | ValueError), caught.value
        # A read raises too, unless the storage can still answer it (an SQLite file whose
        # write lock another process holds): then the answer is the true one, never empty.
        with outage():
            try:
                listed = topics.bindings()
            except (TypeError, ValueError):
                raise
            except Exception:
                pass
            else:
                assert listed == [(word, name)]
        assert topics.publish(word, "after") == 1
        assert [e.data for e in _envelopes(q)] == ["after"]

    # -- live subscribers --------------------------------------------------------------------

    def test_a_live_subscriber_receives_what_any_store_object_publishes(
        self, harness: StorageHarness
    ) -> None:
        word = fresh_word()
        live = self.live(harness).subscribe(f"{word}.*.created")
        assert isinstance(live, ILiveSubscription)
        try:
            publisher = self.live(harness)
            publisher.publish(f"{word}.eu.created", {"n": 1}, message_id=f"m-{word}")
            publisher.publish(f"{word}.eu.cancelled", {"n": 2})
            publisher.publish(f"{word}.us.created", {"n": 3})
            got = [live.get(WAIT) for _ in range(2)]
            assert [(m.name, m.data, m.message_id) for m in got if m is not None] == [
                (f"{word}.eu.created", {"n": 1}, f"m-{word}"),
                (f"{word}.us.created", {"n": 3}, None),
            ]
            assert (live.pattern, live.active, live.dropped, live.missed) == (
                f"{word}.*.created",
                True,
                0,
                0,
            )
        finally:
            live.unsubscribe()

    @pytest.mark.parametrize("pattern", ["#", "a.#", "a.*", "*.b.#", "#.c", "a.b.c"])
    def test_live_patterns_match_as_in_memory(self, harness: StorageHarness, pattern: str) -> None:
        topics = self.live(harness)
        word = fresh_word()
        live = topics.subscribe(f"{word}.{pattern}")
        names = ["a", "a.b", "a.b.c", "b.c", "a.b.c.d"]
        # Last, a name the pattern matches ("z" for each wildcard): once it came, all had.
        end = ".".join("z" if w in ("*", "#") else w for w in pattern.split("."))
        try:
            for name in names:
                topics.publish(f"{word}.{name}", name)
            topics.publish(f"{word}.{end}", None)
            got = []
            while (message := live.get(WAIT)) is not None and message.data is not None:
                got.append(message.data)
            assert message is not None, "the last publish was not received"
            expected = [n for n in names if matches(check_pattern(pattern), check_name(n))]
            assert got == expected
        finally:
            live.unsubscribe()

    def test_unsubscribe_ends_a_live_iteration(self, harness: StorageHarness) -> None:
        word = fresh_word()
        topics = self.live(harness)
        live = topics.subscribe(word)
        got: list[Any] = []
        reader = threading.Thread(target=lambda: got.extend(m.data for m in live))
        reader.start()
        topics.publish(word, 1)
        _eventually(lambda: got == [1], "the live subscriber did not receive the publish")
        assert live.unsubscribe() is True
        reader.join(WAIT)
        assert not reader.is_alive() and not live.active
        assert live.unsubscribe() is False

    def test_a_full_live_subscriber_drops_by_its_policy_and_counts_it(
        self, harness: StorageHarness
    ) -> None:
        word = fresh_word()
        topics = self.live(harness)
        live = topics.subscribe(word, max_pending=2, on_full="drop_newest")
        try:
            for i in range(5):
                topics.publish(word, i)
            _eventually(lambda: live.dropped == 3, f"dropped is {live.dropped}, not 3")
            assert [m.data for m in (live.get(0), live.get(0))] == [0, 1]
        finally:
            live.unsubscribe()

    def test_a_live_subscriber_reconnects_on_its_own_and_counts_what_it_may_have_missed(
        self, harness: StorageHarness
    ) -> None:
        topics = self.live(harness)
        disconnect = getattr(harness, "disconnect", None)
        if disconnect is None:
            pytest.skip("the harness cannot take a connection away (no disconnect)")
        word = fresh_word()
        live = topics.subscribe(word)
        try:
            with disconnect():
                for i in range(3):
                    self.live(harness).publish(word, ("meanwhile", i))
            _eventually(lambda: live.reconnects >= 1, "the subscriber did not reconnect")
            topics.publish(word, "after")
            got = []
            while (message := live.get(WAIT)) is not None:
                got.append(message.data)
                if message.data == "after":
                    break
            assert got[-1] == "after", "a publish made after the reconnection was not received"
            assert len(got) - 1 + live.missed >= 3, (got, live.missed)  # nothing lost silently
        finally:
            live.unsubscribe()
