"""Group commit (varmq.contract.batching): every caller is told what happened to its own items,
whether it wrote alone, led a batch or rode along in one: its answers, or the exception of its
batch's write. sqliteq's and redisq's adds use it (test_sqliteq_group_commit.py and
test_redisq_producer.py test it there, on a file and on Redis), and so do the acknowledgements
of every storage queue, without waiting (test_acknowledgements.py)."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any

from varmq.contract.batching import GroupCommit

WAIT = 10.0


class _HeldWrite:
    """A write that holds its first call until told, so that later callers pile up behind it.

    Answers each item with the item modulo 3 (so callers get different answers), and records
    every batch it was given.
    """

    def __init__(self, fail_batch: int | None = None) -> None:
        self.batches: list[list[int]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self._fail_batch = fail_batch

    def __call__(self, gather: Callable[[], list[int]]) -> list[int]:
        items = gather()
        self.batches.append(list(items))
        if len(self.batches) == 1:
            self.entered.set()
            assert self.release.wait(WAIT)
        if self._fail_batch == len(self.batches):
            raise ConnectionError("the batch's write failed")
        return [n % 3 for n in items]


def _one(group: GroupCommit[int, int], n: int) -> int:
    (answer,) = group.submit((n,))
    return answer


def _pile_up(
    group: GroupCommit[int, int], write: _HeldWrite, numbers: Sequence[int]
) -> dict[int, Any]:
    """Number 0 leads and is held; the others arrive while it writes. Each one's outcome."""
    outcomes: dict[int, Any] = {}

    def add(n: int) -> None:
        try:
            outcomes[n] = _one(group, n)
        except Exception as exc:
            outcomes[n] = exc

    leader = threading.Thread(target=add, args=(numbers[0],))
    leader.start()
    assert write.entered.wait(WAIT)
    followers = [threading.Thread(target=add, args=(n,)) for n in numbers[1:]]
    for thread in followers:
        thread.start()
    _until(lambda: len(group._waiting) == len(followers))
    write.release.set()
    for thread in [leader, *followers]:
        thread.join(WAIT)
    return outcomes


def _until(condition: Callable[[], bool]) -> None:
    done = threading.Event()
    for _ in range(int(WAIT / 0.01)):
        if condition():
            return
        done.wait(0.01)
    raise AssertionError("condition not reached")


def test_a_caller_alone_is_written_at_once_in_a_batch_of_its_own() -> None:
    batches: list[list[int]] = []

    def write(gather: Callable[[], list[int]]) -> list[int]:
        batches.append(gather())
        return [1] * len(batches[-1])

    group: GroupCommit[int, int] = GroupCommit(write)
    assert _one(group, 7) == 1
    assert group.submit((8, 9)) == [1, 1]
    assert batches == [[7], [8, 9]]
    assert group.unanswered == 0


def test_callers_arriving_during_a_write_go_in_the_next_write_each_with_its_own_answer() -> None:
    write = _HeldWrite()
    group: GroupCommit[int, int] = GroupCommit(write)
    outcomes = _pile_up(group, write, range(10))
    assert outcomes == {n: n % 3 for n in range(10)}
    assert [len(batch) for batch in write.batches] == [1, 9]  # one write for the nine


def test_a_write_takes_at_most_max_batch_items_and_the_rest_go_in_the_next() -> None:
    write = _HeldWrite()
    group: GroupCommit[int, int] = GroupCommit(write, max_batch=4, rounds=10)
    outcomes = _pile_up(group, write, range(10))
    assert outcomes == {n: n % 3 for n in range(10)}
    assert [len(batch) for batch in write.batches] == [1, 4, 4, 1]


def test_a_leader_hands_the_lead_on_after_its_rounds_and_every_caller_is_answered() -> None:
    # Every write sees one more caller arrive: rounds keep coming, more than one leader writes.
    batches: list[list[int]] = []
    leaders: list[threading.Thread] = []
    outcomes: dict[int, int] = {}
    threads: list[threading.Thread] = []

    def add(n: int) -> None:
        outcomes[n] = _one(group, n)

    def write(gather: Callable[[], list[int]]) -> list[int]:
        items = gather()
        batches.append(items)
        leaders.append(threading.current_thread())
        if len(batches) < 10:
            arriving = threading.Thread(target=add, args=(len(batches),))
            arriving.start()
            threads.append(arriving)
            _until(lambda: len(group._waiting) == 1)
        return list(items)

    group: GroupCommit[int, int] = GroupCommit(write, rounds=4)
    add(0)
    for thread in threads:
        thread.join(WAIT)
    assert outcomes == {n: n for n in range(10)}
    assert batches == [[n] for n in range(10)]
    # Four writes each, then the oldest waiting caller leads: 0 (this thread), 4 and 8.
    assert [leaders.index(t) for t in dict.fromkeys(leaders)] == [0, 4, 8]


def test_a_child_forked_during_a_write_writes_at_once() -> None:
    write = _HeldWrite()
    group: GroupCommit[int, int] = GroupCommit(write)
    leader = threading.Thread(target=_one, args=(group, 1))
    leader.start()
    assert write.entered.wait(WAIT)  # the parent's write is in flight when it forks
    pid = os.fork()
    if pid == 0:  # the child: no leader thread here; its write must not wait for one
        signal.alarm(int(WAIT))
        os._exit(0 if _one(group, 5) == 2 else 1)
    write.release.set()
    leader.join(WAIT)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_failing_write_tells_every_caller_of_that_write_and_no_other() -> None:
    write = _HeldWrite(fail_batch=2)
    group: GroupCommit[int, int] = GroupCommit(write)
    outcomes = _pile_up(group, write, range(6))
    assert outcomes[0] == 0  # the first write worked
    for n in range(1, 6):
        assert isinstance(outcomes[n], ConnectionError), outcomes[n]
    assert _one(group, 4) == 1  # the next add writes again
    assert group.unanswered == 0


def test_a_write_that_fails_before_it_gathers_tells_the_callers_waiting_for_it() -> None:
    def write(gather: Callable[[], list[int]]) -> list[int]:
        raise ConnectionError("no connection")

    group: GroupCommit[int, int] = GroupCommit(write)
    try:
        _one(group, 1)
    except ConnectionError:
        pass
    else:
        raise AssertionError("the write's error was not raised")
    assert group.unanswered == 0 and not group._waiting


def test_an_answer_of_the_wrong_length_fails_the_batch_rather_than_guess() -> None:
    group: GroupCommit[int, int] = GroupCommit(lambda gather: [1] * len(gather()))
    assert _one(group, 1) == 1
    write = _HeldWrite()
    group = GroupCommit(lambda gather: write(gather)[:1])
    outcomes = _pile_up(group, write, range(3))
    assert outcomes[0] == 0
    assert all(isinstance(outcomes[n], RuntimeError) for n in (1, 2))


def test_posts_wait_for_nobody_and_go_in_the_next_write() -> None:
    batches: list[list[int]] = []

    def write(gather: Callable[[], list[int]]) -> list[int]:
        batches.append(gather())
        return [0] * len(batches[-1])

    group: GroupCommit[int, int] = GroupCommit(write)
    assert not group.post((1, 2), send=False)  # held: nobody writes yet
    assert group.unanswered == 2 and batches == []
    assert group.post((3,))  # no write under way: this caller writes, the held ones with it
    assert batches == [[1, 2, 3]] and group.unanswered == 0
    assert not group.flush()  # nothing waits
    group.post((4,), send=False)
    assert group.flush() and batches[-1] == [4]
