"""Acceptance: ``varmq worker MODULE:ATTR --processes 2 --hard-timeout 0.5``, a supervisor and
its children as real processes, one child ending itself over a job that ignores its timeout
(tests/acceptance/fleet_hard_app.py; docs/deploy.md).

The fleet helpers are those of tests/acceptance/test_fleet_processes.py (the supervisor's stderr
read on a thread, the children's job log of ``start``/``done`` lines, every wait bounded), the
record and dead-letter readers those of tests/acceptance/test_hard_timeout_processes.py. On
sqliteq: one job hangs in ``threading.Event().wait(60)`` under a 0.3 s timeout and one attempt,
among quick jobs. Its child must end itself (status 4) and be replaced at once; the hanging job
must be dead-lettered as timed out; every quick job must be done, each once but for those the
ended child had started (handed back, they may run again); SIGTERM then ends the fleet with
status 0 and no child left.
"""

from __future__ import annotations

import re
import signal
import time
from datetime import datetime

import pytest

import varmq
from tests.acceptance.actors import open_store
from tests.acceptance.fleet_hard_app import TIMEOUT
from tests.acceptance.test_fleet_processes import (
    StartFleet,
    _alive,
    _all_gone,
    _fill,
    _stats,
    _twice,
    _wait_until,
    sqlite_store,
    start_fleet,
)
from tests.acceptance.test_hard_timeout_processes import _dead_letters, _record

# The fleet tests' fixtures, imported: pytest finds a fixture among a test module's names.
__all__ = ["sqlite_store", "start_fleet"]

pytestmark = pytest.mark.timeout(30)

APP = "tests.acceptance.fleet_hard_app:worker"
HARD_TIMEOUT = 0.5
QUICK = 30
JOB_SECONDS = 0.1  # a quick job: well within TIMEOUT, long enough to be running at the end
WAIT = 15.0  # the longest any one wait may take (each is far shorter when all is well)
_ENDED = re.compile(
    r"varmq: child (\d+) \(pid (\d+)\) ended itself after ([\d.]+) s, a job past its hard "
    r"timeout; starting a new one$"
)


def _logged_at(line: str) -> float:
    """The wall time a log line of the fleet (``2026-01-01 12:00:00,123 LEVEL ...``) was
    written at."""
    stamp = datetime.strptime(" ".join(line.split()[:2]), "%Y-%m-%d %H:%M:%S,%f")
    return stamp.timestamp()


def _add_hanging_job(store: str, queue: str) -> None:
    queues = open_store(store)
    try:
        handle = varmq.new_distributed_queue(queues.new_distributed_queue(queue))
        assert handle.add({"id": "hang"}, job_id="hang")
    finally:
        queues.close()


def test_a_child_past_its_hard_timeout_ends_itself_and_is_replaced_at_once(
    sqlite_store: str,
    start_fleet: StartFleet,
) -> None:
    began = time.monotonic()
    fleet, log = start_fleet(
        sqlite_store,
        "--processes",
        "2",
        "--grace",
        "10",
        "--hard-timeout",
        str(HARD_TIMEOUT),
        target=APP,
        job_seconds=JOB_SECONDS,
    )
    first_children = log.wait_ready(fleet, 2)
    _add_hanging_job(sqlite_store, fleet.queue)
    expected = _fill(sqlite_store, fleet, QUICK)

    # The child running the hanging job ends itself, with its one ERROR line, and says so.
    [ended_line] = fleet.wait_for("a job past its hard timeout", timeout=WAIT)
    match = _ENDED.search(ended_line)
    assert match is not None, ended_line
    slot, victim = int(match[1]), int(match[2])
    assert victim in first_children and fleet.children()[slot][0] == victim, fleet.text()
    assert "hang" in log.ids("start", victim), log.entries()
    [error] = fleet.wait_for(" ERROR ", timeout=5)
    assert (
        "a job function ran" in error
        and f"past its timeout, beyond hard_timeout={HARD_TIMEOUT:g}" in error
        and "worker fleet-hard, job 'hang' of queue" in error
        and f"timeout {TIMEOUT:g} s" in error
    ), error
    assert "exits 4" in error, error
    [stopped] = fleet.wait_for("after hard_timeout:", timeout=5)
    assert "exit status 4" in stopped, stopped
    handed = re.search(r"(\d+) running jobs? handed back to storage to run again at once,", stopped)
    assert handed is not None and "left to" not in stopped, stopped

    # A new child in its slot at once: no back-off, ready to work.
    [_, started_line] = fleet.wait_for(f"child {slot} started", count=2, timeout=WAIT)
    # "at once" is what the ended line said ("starting a new one", no "in X s"): a timing
    # check here would fail on a loaded machine without saying anything more.
    gap = _logged_at(started_line) - _logged_at(ended_line)
    assert gap >= 0, fleet.text()
    replacement = fleet.children()[slot][1]
    assert replacement != victim
    _wait_until(lambda: replacement in log.pids("ready"), f"child {replacement} ready", WAIT)
    assert _alive(replacement), fleet.text()
    other = next(pid for pid in first_children if pid != victim)
    assert _alive(other), fleet.text()
    assert not _alive(victim), fleet.text()

    # Every quick job done; a job done twice is one the ended child had started.
    log.wait_all_done(expected, timeout=WAIT)
    done = log.ids("done")
    by_victim = set(log.ids("start", victim)) - {"hang"}
    twice = _twice(done)
    running_at_end = sorted(by_victim - set(log.ids("done", victim)))
    # Handed back: each job the ended child left unfinished, and those whose function returned
    # while it was ending (those are the ones that may run twice).
    assert int(handed[1]) >= len(running_at_end), (stopped, running_at_end)
    assert len(twice) <= int(handed[1]), (stopped, twice)
    assert set(done) == expected, f"lost: {sorted(expected - set(done))}, extra: {set(done)}"
    assert set(twice) <= by_victim, (
        f"jobs ran twice that the ended child never started: {sorted(set(twice) - by_victim)} "
        f"(all that ran twice: {twice}; started by the ended child: {sorted(by_victim)})"
    )

    # The hanging job: failed as timed out at its timeout, its one attempt, dead-lettered.
    record = _record(sqlite_store, fleet.queue, "hang")
    assert record is not None and record.state == "dead", record
    assert record.error is not None and record.error.type == "JobTimeoutError", record
    assert record.attempts == 1, record
    [dead] = _dead_letters(sqlite_store, fleet.queue)
    assert "JobTimeoutError" in dead["error"], dead
    assert log.ids("done")["hang"] == 0 and log.ids("start")["hang"] == 1, log.entries()
    # Each quick job succeeded: one handed back ran again, not dead-lettered for it.
    states = {job: _record(sqlite_store, fleet.queue, job) for job in sorted(expected)}
    failed = {job: getattr(r, "state", None) for job, r in states.items()}
    failed = {job: state for job, state in failed.items() if state != "succeeded"}
    assert failed == {}, failed
    # A handed-back run counts as an attempt (as a lease's expiry would); nothing else does.
    attempts = {job: r.attempts for job, r in states.items() if r is not None}
    again = set(running_at_end) | set(twice)
    wrong = {job: n for job, n in attempts.items() if n != (2 if job in again else 1)}
    assert wrong == {}, f"attempts (handed back: {sorted(again)}): {wrong}"

    # SIGTERM: the fleet drains and exits 0, no child left.
    fleet.process.send_signal(signal.SIGTERM)
    status = fleet.exit_status(WAIT)
    assert status == 0, fleet.text()
    _all_gone(fleet.pids(), 5)
    fleet.wait_closed(5)
    stats = _stats(sqlite_store, fleet)
    assert (stats["in_flight"], stats["waiting"]) == (0, 0), stats
    summaries = fleet.wait_for("varmq: stopped 1 worker in", count=3, timeout=1)
    summaries = [line for line in summaries if "after SIGTERM:" in line]
    assert len(summaries) == 2, fleet.text()  # the ended child's was after hard_timeout
    assert all("0 still running, 0 not acknowledged" in line for line in summaries), summaries

    took = time.monotonic() - began
    assert took < 30, f"{took:.1f} s"
    print(
        f"\nchild {slot} (pid {victim}) {ended_line.split(') ', 1)[1].split(',')[0]}; "
        f"replaced by pid {replacement} {gap:.2f} s later; the ended child "
        f"started {len(by_victim)} quick jobs, {len(running_at_end)} unfinished "
        f"({running_at_end}); {len(twice)} ran twice ({twice}); all {QUICK} done; "
        f"{took:.1f} s in all"
    )
