"""Acceptance: cancel by id while two consumer processes run the queue (docs/results.md,
"Cancelling").

Two consumer processes (``cancel_actors``: concurrency 2 each, ``Retry(max_attempts=2)``) run a
distributed queue opened with ``keep_results``; every run logs ``start <id> <monotonic>``
before it does anything, sleeps 0-30 ms and raises ``ValueError`` one time in ten. The test
process adds ``JOBS`` jobs with ids and, on a thread of its own, cancels 60% of them while the
consumers run: each at a moment drawn around the consumers' progress (read from their logs),
so that some are cancelled while queued, some while running, some after they ended. It keeps
``(job_id, answer, time.monotonic() right after cancel returned)`` of every cancel, waits for
every record to end, stops the consumers and checks, for every job id:

1. ``cancel`` answered ``True``: no worker took the job after the call returned. A run may
   still start after the answer when the job was taken before it (the docs count a job taken
   as started: a worker takes a job of such a queue only for a free slot, and one that waits
   more than a few milliseconds for its thread asks the storage again before it starts); its
   first line then trails the answer by the time the worker needs to schedule a thread, which
   a loaded machine can stretch to tens of milliseconds. So the order is checked on the
   storage's clock (the record's ``started_at`` is the last take), and the longest such
   trail is printed in the summary;
2. every record ended (succeeded, failed, dead or cancelled); a job whose cancel answered
   ``True`` ended ``cancelled``, or ``succeeded`` when it was running (it ran: the cancel came
   too late to matter); ``False``: it had ended, by a run that started before; not cancelled:
   not ``cancelled``;
3. a ``cancelled`` record of a job that ran keeps an error and never says "before it ran"; one
   that keeps no error never ran, or was cancelled while it waited for its retry;
4. no job started more often than its attempts: twice only after a first run that raised, and
   the record's ``attempts`` count exactly its starts.

``time.monotonic()`` is ``CLOCK_MONOTONIC`` on Linux, one clock for every process of the
machine: the consumers' start times and this process's cancel times are comparable. Records'
times are Unix seconds on the storage's clock, this machine's for both stores (sqliteq: the
taking process's wall clock; redisq: the session's local redis-server), in whole milliseconds.
"""

from __future__ import annotations

import random
import signal
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

import varmq
from tests.acceptance.cancel_actors import RETRY, open_queue
from tests.acceptance.process_tools import STORES, expect_line, spawn, store_url

pytestmark = pytest.mark.timeout(90)

JOBS = 400
CANCEL_SHARE = 0.6
AHEAD, BEHIND = 8, 3
"""A cancel is made once the consumers started a job between ``AHEAD`` before its target and
``BEHIND`` after it (FIFO: ids in the order they were added)."""
STALL = 0.3
"""Seconds without a new start after which the canceller stops waiting for its moment (the jobs
left may all be cancelled or ended)."""
CANCEL_DEADLINE = 30.0
RECORD_WAIT = 45.0
CLOCK_STEP = 0.002
"""Records' times are whole milliseconds (truncated), plus a millisecond for the clocks'
reads."""
"""Seconds the test gives every record in all to end."""
ENDED = ("succeeded", "failed", "dead", "cancelled")


def _job_id(index: int) -> str:
    return f"job-{index:03d}"


def _spawn(*args: str, stdout: int | IO[Any] = subprocess.PIPE) -> subprocess.Popen[str]:
    return spawn("tests.acceptance.cancel_actors", *args, stdout=stdout)


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url(request, tmp_path)


# -- the consumers' logs -------------------------------------------------------------------------


@dataclass
class Run:
    """One run of a job, from a consumer's log."""

    attempt: int
    started: float
    pid: int
    ended: float | None = None
    outcome: str | None = None  # "ok" or "raise"; None: no end line (not expected)


@dataclass
class Logs:
    """The consumers' log files, read as they grow (``poll``) and once they stopped (``runs``)."""

    paths: list[Path]
    highest: int = -1  # the highest job index started so far
    last_change: float = field(default_factory=time.monotonic)
    _offsets: list[int] = field(default_factory=list)
    _tails: list[bytes] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._offsets = [0] * len(self.paths)
        self._tails = [b""] * len(self.paths)

    def poll(self) -> None:
        """Read what the consumers appended since the last call (whole lines only)."""
        for n, path in enumerate(self.paths):
            with path.open("rb") as log:
                log.seek(self._offsets[n])
                data = log.read()
            if not data:
                continue
            self._offsets[n] += len(data)
            *lines, self._tails[n] = (self._tails[n] + data).split(b"\n")
            for line in lines:
                words = line.split()
                if words[:1] == [b"start"]:
                    index = int(words[1].decode().removeprefix("job-"))
                    if index > self.highest:
                        self.highest = index
                        self.last_change = time.monotonic()

    def runs(self) -> dict[str, list[Run]]:
        """Every run of every job, by id, in the order of their attempts."""
        runs: dict[str, list[Run]] = {}
        for path in self.paths:
            for line in path.read_text().splitlines():
                words = line.split()
                if words[0] == "start":
                    job_id, at, attempt, pid = words[1], float(words[2]), int(words[3]), words[4]
                    runs.setdefault(job_id, []).append(Run(attempt, at, int(pid)))
                elif words[0] == "end":
                    job_id, at, attempt, outcome = (
                        words[1],
                        float(words[2]),
                        int(words[3]),
                        words[4],
                    )
                    run = next(r for r in runs[job_id] if r.attempt == attempt and r.ended is None)
                    run.ended, run.outcome = at, outcome
        for job_runs in runs.values():
            job_runs.sort(key=lambda r: (r.attempt, r.started))
        return runs


# -- the canceller -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cancel:
    job_id: str
    answer: bool
    returned: float  # time.monotonic() right after cancel() returned
    returned_at: float  # time.time() then: records' times are Unix seconds


def _plan(rng: random.Random) -> list[tuple[int, int]]:
    """``(target index, the highest started index to wait for)`` of every cancel, in order."""
    targets = rng.sample(range(JOBS), int(JOBS * CANCEL_SHARE))
    moments = [(index, index + rng.randint(-AHEAD, BEHIND)) for index in targets]
    return sorted(moments, key=lambda moment: moment[1])


def _cancel_all(
    store: str, queue: str, plan: list[tuple[int, int]], logs: Logs, added: list[int]
) -> list[Cancel]:
    """Cancel every target of ``plan`` at its moment (through a handle of its own); the answers.
    ``added[0]``: how many jobs the producer added so far (a job is cancelled once added)."""
    queues, q = open_queue(store, queue)
    handle = varmq.new_distributed_queue(q)
    deadline = time.monotonic() + CANCEL_DEADLINE
    cancels: list[Cancel] = []
    try:
        for index, moment in plan:
            while True:  # poll the logs until the moment (or a stall), within the deadline
                assert time.monotonic() < deadline, f"cancels not done in {CANCEL_DEADLINE} s"
                logs.poll()
                if added[0] > index and (
                    logs.highest >= moment
                    or (added[0] == JOBS and time.monotonic() - logs.last_change > STALL)
                ):
                    break
                time.sleep(0.001)
            job_id = _job_id(index)
            answer = handle.cancel(job_id)
            cancels.append(Cancel(job_id, answer, time.monotonic(), time.time()))
    finally:
        queues.close()
    return cancels


# -- the test ------------------------------------------------------------------------------------


def test_a_cancel_that_answers_true_means_the_job_does_not_start_afterwards(
    store: str, processes: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    seed = str(time.time_ns())
    queue = f"cancels-{seed}"
    began = time.monotonic()
    paths = [tmp_path / f"consumer-{n}.log" for n in range(2)]
    for path in paths:
        path.touch()
    consumers = [_spawn("consume", store, queue, str(path), seed) for path in paths]
    processes.extend(consumers)
    for consumer in consumers:
        expect_line(consumer, "ready")

    queues, q = open_queue(store, queue)
    handle = varmq.new_distributed_queue(q)
    try:
        logs = Logs(paths)
        added = [0]
        cancels: list[Cancel] = []
        failure: list[BaseException] = []

        def canceller() -> None:
            try:
                cancels.extend(_cancel_all(store, queue, _plan(random.Random(seed)), logs, added))
            except BaseException as exc:  # reported by the test thread
                failure.append(exc)

        thread = threading.Thread(target=canceller, name="canceller", daemon=True)
        thread.start()
        for i in range(JOBS):
            assert handle.add({"n": i}, job_id=_job_id(i), strict=True)
            added[0] = i + 1
        thread.join(CANCEL_DEADLINE + 5)
        assert not thread.is_alive(), "the canceller did not finish"
        if failure:
            raise failure[0]
        records = _wait_for_records(handle)
    finally:
        queues.close()
    for consumer in consumers:
        consumer.send_signal(signal.SIGTERM)
    for consumer in consumers:
        assert consumer.wait(timeout=30) == 0, "a consumer did not stop cleanly"
    took = time.monotonic() - began

    counts = _check(records, logs.runs(), cancels, seed)
    kind = "sqliteq" if store.startswith("sqlite:") else "redisq"
    print(
        f"\n{kind}: {took:.1f} s, seed {seed}: " + ", ".join(f"{k} {n}" for k, n in counts.items())
    )


def _wait_for_records(handle: Any) -> dict[str, varmq.JobRecord]:
    """Every job's record once it ended, within ``RECORD_WAIT`` s in all (``result_of``: woken
    by the storage's notifications, not a read loop)."""
    deadline = time.monotonic() + RECORD_WAIT
    records: dict[str, varmq.JobRecord] = {}
    for i in range(JOBS):
        job_id = _job_id(i)
        try:
            handle.result_of(job_id, timeout=max(0.1, deadline - time.monotonic()))
        except varmq.JobFailedError:
            pass  # the record says how it ended
        except TimeoutError:
            pass  # reported below with its record
        record = handle.job(job_id)
        assert record is not None, f"no record of {job_id}"
        records[job_id] = record
    late = {job_id: r.state for job_id, r in records.items() if not r.ended}
    assert not late, f"records not ended within {RECORD_WAIT} s: {late}"
    return records


def _message(record: varmq.JobRecord) -> str:
    """What ``result_of`` says of an ended record that did not succeed."""
    try:
        record.value()
    except varmq.JobFailedError as exc:
        return str(exc)
    return ""


def _check(
    records: dict[str, varmq.JobRecord],
    runs: dict[str, list[Run]],
    cancels: list[Cancel],
    seed: str,
) -> dict[str, int]:
    """Assert the four promises for every job id; the counts of what happened."""
    ids = [_job_id(i) for i in range(JOBS)]
    assert sorted(records) == ids
    assert set(runs) <= set(ids), f"runs of unknown ids: {sorted(set(runs) - set(ids))}"
    by_id = {cancel.job_id: cancel for cancel in cancels}
    assert len(by_id) == len(cancels) == int(JOBS * CANCEL_SHARE), "each target cancelled once"
    problems: dict[str, list[str]] = {"1": [], "2": [], "3": [], "4": []}
    counts: Counter[str] = Counter()
    longest = 0.0  # the longest gap of those

    def report(rule: str, job_id: str, why: str) -> None:
        problems[rule].append(
            f"{job_id}: {why}; record {records[job_id]}; runs {runs.get(job_id, [])}; "
            f"cancel {by_id.get(job_id)}"
        )

    for job_id in ids:
        record, job_runs, cancel = records[job_id], runs.get(job_id, []), by_id.get(job_id)
        message = _message(record)

        # (1) True: no run taken after the cancel returned (a run taken before may start after).
        if cancel is not None and cancel.answer:
            for run in job_runs:
                gap = run.started - cancel.returned
                if gap <= 0:
                    continue
                # The record's started_at is the last take: a run after a True cancel must be
                # the last one, taken before the answer, and started at once.
                taken = record.started_at if run.attempt == record.attempts else None
                if taken is None or taken > cancel.returned_at + CLOCK_STEP:
                    when = (
                        "not its last" if taken is None else f"{taken - cancel.returned_at:+.4f} s"
                    )
                    report(
                        "1",
                        job_id,
                        f"attempt {run.attempt} started {gap * 1000:.3f} ms after the cancel "
                        f"returned True (its take: {when} from the answer)",
                    )
                else:
                    counts["True, its first line just after the answer (taken before)"] += 1
                    longest = max(longest, gap)

        # (2) Exactly one end, the one the answer allows.
        if record.state not in ENDED:
            report("2", job_id, f"did not end ({record.state})")
        elif cancel is None:
            if record.state == "cancelled":
                report("2", job_id, "cancelled, though never cancelled")
        elif cancel.answer:
            if record.state == "succeeded" and not job_runs:
                report("2", job_id, "succeeded after a cancel that answered True, never ran")
            elif record.state not in ("cancelled", "succeeded"):
                report("2", job_id, f"{record.state} after a cancel that answered True")
        else:
            if record.state == "cancelled":
                report("2", job_id, "cancelled by a cancel that answered False")
            elif not job_runs or job_runs[-1].started > cancel.returned:
                report("2", job_id, "False, yet its last run started after the cancel")

        # (3) A cancelled record says whether the job ran.
        if record.state == "cancelled":
            if "before it ran" in message and job_runs:
                report("3", job_id, f"it ran, the record says {message!r}")
            if record.error is None:
                # Never ran ("before it ran"); or every run raised and the cancel found it
                # waiting for its retry ("before attempt N"): no run was going on then.
                going_on = cancel is None or any(
                    run.ended is None or run.ended > cancel.returned for run in job_runs
                )
                if job_runs and (going_on or any(run.outcome != "raise" for run in job_runs)):
                    report("3", job_id, "a run was going on at the cancel, yet no error kept")
            elif job_runs:
                if record.error.type not in ("ValueError", "JobCancelledError"):
                    report("3", job_id, f"unexpected error {record.error.type}")
                if record.error.type == "ValueError" and job_runs[-1].outcome != "raise":
                    report("3", job_id, "keeps a ValueError its last run did not raise")
                if record.error.type == "JobCancelledError" and "while it ran" not in message:
                    report("3", job_id, f"it ran, the record says {message!r}")
            elif "before it ran" not in message:
                report("3", job_id, f"it never ran, the record says {message!r}")

        # (4) Started at most once per attempt; the record counts every start.
        if len(job_runs) > RETRY.max_attempts:
            report("4", job_id, f"started {len(job_runs)} times")
        if [run.attempt for run in job_runs] != list(range(1, len(job_runs) + 1)):
            report("4", job_id, "runs are not attempts 1, 2, ... once each")
        if len(job_runs) > 1 and job_runs[0].outcome != "raise":
            report("4", job_id, "started again though its first run did not raise")
        taken_not_started = (
            record.state == "cancelled" and not job_runs and "before it ran" in message
        )
        if record.attempts != len(job_runs) and not (taken_not_started and record.attempts == 1):
            report("4", job_id, f"attempts {record.attempts}, {len(job_runs)} start(s)")

        # What happened, for the summary.
        counts[record.state] += 1
        if len(job_runs) > 1:
            counts["retried"] += 1
        if cancel is None:
            continue
        counts[f"cancel {cancel.answer}"] += 1
        if not cancel.answer:
            continue
        ended = record.state
        if record.state == "cancelled":
            ended += f" ({'no error' if record.error is None else record.error.type})"
        if not job_runs:
            counts["True before it started"] += 1
        elif any(run.ended is None or run.ended > cancel.returned for run in job_runs):
            counts[f"True while running -> {ended}"] += 1
        else:
            counts[f"True after its function returned -> {ended}"] += 1

    found = {rule: lines for rule, lines in problems.items() if lines}
    assert not found, f"seed {seed}: " + "\n".join(
        f"rule {rule}: {len(lines)} job(s):\n  " + "\n  ".join(lines[:20])
        for rule, lines in found.items()
    )
    result = dict(sorted(counts.items()))
    result["longest take-to-start gap (us)"] = round(longest * 1e6)
    return result
