"""Acceptance: ``varmq worker MODULE:ATTR --processes N``, a supervisor and its children as real
processes (docs/deploy.md, "Every core").

Each test starts the supervisor (``python -m varmq worker tests.acceptance.fleet_app:...``),
reads its standard error (its own lines and its children's, which inherit it) on a thread, and
waits on those lines or on the job log the children append to (``start ID PID`` and
``done ID PID``, ``ready PID``), every wait bounded. Children are found by the supervisor's
``child N started (pid P)`` lines, and counted gone when ``/proc`` no longer has them (or has
them as zombies: a child whose supervisor was SIGKILLed is reparented, and reaping it is its
new parent's business). Every job id is counted. The first test runs on sqliteq and on redisq
(the session's redis-server), the others on sqliteq.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

import varmq
from tests.acceptance.actors import open_store
from varmq.ops.supervisor import GIVE_UP_AFTER, KILL_AFTER_FORCED

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.acceptance.fleet_app"
DEADLINE = 60.0
"""The longest any one wait of these tests may take (each is far shorter when all is well)."""

T = TypeVar("T")
_STARTED = re.compile(r"varmq: child (\d+) started \(pid (\d+)\)")


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs: in ``/proc`` and not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _wait_until(predicate: Callable[[], T | None], what: str, timeout: float = DEADLINE) -> T:
    """``predicate()``'s first truthy answer, polled (another process's file or ``/proc``:
    there is nothing to wait on) for at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        answer = predicate()
        if answer:
            return answer
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(0.02)


class Fleet:
    """A supervisor started by the test, its standard error read line by line on a thread."""

    def __init__(self, process: subprocess.Popen[str], queue: str) -> None:
        self.process = process
        self.queue = queue
        self.lines: list[str] = []
        self.closed = False  # the pipe's end: the supervisor and every child closed it
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, name="fleet-stderr", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        self.process.stderr.close()
        with self._changed:
            self.closed = True
            self._changed.notify_all()

    def text(self) -> str:
        with self._changed:
            return "\n".join(self.lines)

    def wait_for(self, text: str, count: int = 1, timeout: float = DEADLINE) -> list[str]:
        """The first ``count`` lines holding ``text``, once there are that many."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = [line for line in self.lines if text in line]
                if len(found) >= count:
                    return found[:count]
                left = deadline - time.monotonic()
                assert left > 0 and not self.closed, (
                    f"{len(found)} of {count} lines with {text!r} after "
                    f"{timeout - max(left, 0):.1f} s; the output:\n" + "\n".join(self.lines)
                )
                self._changed.wait(left)

    def wait_closed(self, timeout: float) -> None:
        """Until every writer of the pipe (the supervisor and its children) closed it."""
        self._reader.join(timeout)
        assert not self._reader.is_alive(), "a child of the supervisor still holds its stderr"

    def children(self) -> dict[int, list[int]]:
        """Each slot's children, oldest first, by the supervisor's log lines."""
        slots: dict[int, list[int]] = {}
        for line in self.text().splitlines():
            match = _STARTED.search(line)
            if match:
                slots.setdefault(int(match[1]), []).append(int(match[2]))
        return slots

    def pids(self) -> list[int]:
        return [pid for pids in self.children().values() for pid in pids]

    def exit_status(self, timeout: float) -> int:
        """The supervisor's exit status, waited for at most ``timeout`` seconds."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the supervisor did not exit within {timeout:.0f} s:\n{self.text()}"
            ) from None

    def kill_everything(self) -> None:
        """After the test: the supervisor and every child still running, SIGKILLed."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for pid in self.pids():
            with contextlib.suppress(OSError):  # it ended meanwhile
                if _alive(pid) and b"varmq" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(pid, signal.SIGKILL)
        self._reader.join(10)


class JobLog:
    """The children's job log: ``start ID PID``, ``done ID PID`` and ``ready PID`` lines."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def entries(self) -> list[tuple[str, str, int]]:
        """``(kind, job id, pid)`` of each whole line (``ready``: an empty id)."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        out = []
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 3:
                out.append((parts[0], parts[1], int(parts[2])))
            elif len(parts) == 2:
                out.append((parts[0], "", int(parts[1])))
        return out

    def ids(self, kind: str, pid: int | None = None) -> Counter[str]:
        return Counter(i for k, i, p in self.entries() if k == kind and pid in (None, p))

    def pids(self, kind: str) -> Counter[int]:
        return Counter(p for k, _, p in self.entries() if k == kind)

    def running(self) -> dict[int, set[str]]:
        """Per pid, the jobs it started and did not finish."""
        started: dict[int, set[str]] = {}
        for kind, job, pid in self.entries():
            if kind == "start":
                started.setdefault(pid, set()).add(job)
            elif kind == "done":
                started.get(pid, set()).discard(job)
        return {pid: jobs for pid, jobs in started.items() if jobs}

    def wait_ready(self, fleet: Fleet, children: int) -> list[int]:
        """The pids of the ``children`` workers once each logged ``ready``: the fleet's."""
        ready = _wait_until(
            lambda: sorted(self.pids("ready")) if len(self.pids("ready")) >= children else None,
            f"{children} children to be ready",
        )
        assert set(ready) <= set(fleet.pids()), (ready, fleet.children())
        return ready

    def wait_all_done(self, expected: set[str], timeout: float = DEADLINE) -> Counter[str]:
        def done() -> Counter[str] | None:
            counts = self.ids("done")
            return counts if expected <= set(counts) else None

        try:
            return _wait_until(done, f"all {len(expected)} jobs to be done", timeout)
        except AssertionError:
            missing = sorted(expected - set(self.ids("done")))
            raise AssertionError(f"{len(missing)} jobs never done: {missing[:10]}") from None


@pytest.fixture
def sqlite_store(tmp_path: Path) -> str:
    return f"sqlite:{tmp_path / 'jobs.db'}"


@pytest.fixture(params=["sqliteq", "redisq"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "redisq":
        url: str = request.getfixturevalue("redis_url")
        return url
    return f"sqlite:{tmp_path / 'jobs.db'}"


StartFleet = Callable[..., tuple[Fleet, JobLog]]


@pytest.fixture
def start_fleet(processes: list[subprocess.Popen[str]], tmp_path: Path) -> Iterator[StartFleet]:
    """``start_fleet(store, *options, target=..., **env)``: a supervisor of ``varmq worker
    tests.acceptance.fleet_app:TARGET OPTIONS`` on a fresh queue of ``store``, ``FLEET_*``
    variables from ``env`` (``job_seconds=0.5`` sets ``FLEET_JOB_SECONDS``); the fleet and its
    job log. Everything still running after the test is killed."""
    fleets: list[Fleet] = []

    def start(
        store: str, *options: str, target: str = f"{APP}:worker", **env: object
    ) -> tuple[Fleet, JobLog]:
        log = tmp_path / f"jobs-{len(fleets)}.log"
        queue = f"fleet-{os.getpid()}-{time.monotonic_ns()}"
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("FLEET_", "VARMQ_"))}
        environ |= {"FLEET_STORE": store, "FLEET_QUEUE": queue, "FLEET_LOG": str(log)}
        environ |= {f"FLEET_{name.upper()}": str(value) for name, value in env.items()}
        process = subprocess.Popen(
            [sys.executable, "-m", "varmq", "worker", target, *options],
            cwd=ROOT,
            env=environ,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        processes.append(process)
        fleet = Fleet(process, queue)
        fleets.append(fleet)
        return fleet, JobLog(log)

    yield start
    for fleet in fleets:
        fleet.kill_everything()


def _fill(store: str, fleet: Fleet, count: int) -> set[str]:
    """``count`` jobs, ``job-000`` onwards, added to the fleet's queue; their ids."""
    queues = open_store(store)
    try:
        handle = varmq.new_distributed_queue(queues.new_distributed_queue(fleet.queue))
        ids = {f"job-{i:03d}" for i in range(count)}
        for job_id in sorted(ids):
            assert handle.add({"id": job_id}, job_id=job_id)
    finally:
        queues.close()
    return ids


def _stats(store: str, fleet: Fleet) -> dict[str, int]:
    queues = open_store(store)
    try:
        stats: dict[str, int] = queues.new_distributed_queue(fleet.queue).stats()
        return stats
    finally:
        queues.close()


def _twice(done: Counter[str]) -> list[str]:
    return sorted(job for job, n in done.items() if n > 1)


def _all_gone(pids: list[int], timeout: float) -> None:
    _wait_until(
        lambda: not any(_alive(pid) for pid in pids),
        f"the children {pids} to end (alive: {[p for p in pids if _alive(p)]})",
        timeout,
    )


# -- 1. a fleet drains a queue, every job once, and stops on SIGTERM ---------------------------


def test_a_fleet_of_two_runs_every_job_once_and_exits_0_on_sigterm(
    store: str, start_fleet: StartFleet
) -> None:
    fleet, log = start_fleet(store, "--processes", "2", "--grace", "10")
    children = log.wait_ready(fleet, 2)
    expected = _fill(store, fleet, 300)

    done = log.wait_all_done(expected)
    fleet.process.send_signal(signal.SIGTERM)
    status = fleet.exit_status(30)

    assert status == 0, fleet.text()
    assert not [pid for pid in children if _alive(pid)], "a child outlived its supervisor"
    fleet.wait_closed(5)
    done = log.ids("done")
    assert _twice(done) == [], f"{len(_twice(done))} jobs ran twice: {_twice(done)[:10]}"
    assert set(done) == expected
    per_child = log.pids("done")
    assert set(per_child) == set(children), f"jobs per child: {dict(per_child)}"
    summaries = fleet.wait_for("varmq: stopped 1 worker", count=2, timeout=1)
    assert all("0 still running, 0 not acknowledged" in line for line in summaries), summaries
    print(f"\n300 jobs each once; per child: {dict(per_child)}")


# -- 2. a child SIGKILLed mid-job: restarted, its jobs come back after their lease ------------


def test_a_child_killed_by_sigkill_is_replaced_and_its_jobs_run_after_their_lease(
    sqlite_store: str, start_fleet: StartFleet
) -> None:
    fleet, log = start_fleet(
        sqlite_store, "--processes", "2", "--grace", "10", job_seconds=0.2, lease=1.5
    )
    log.wait_ready(fleet, 2)
    expected = _fill(sqlite_store, fleet, 100)

    def running_victim() -> int | None:
        if sum(log.ids("done").values()) < 20:
            return None
        return next(iter(log.running()), None)

    victim = _wait_until(running_victim, "20 jobs done and a child running one")
    os.kill(victim, signal.SIGKILL)
    killed_at = time.monotonic()
    slot = next(n for n, pids in fleet.children().items() if victim in pids)
    [line] = fleet.wait_for(f"child {slot} (pid {victim}) was killed by SIGKILL", timeout=10)
    assert "starting a new one in" in line, line
    _wait_until(lambda: len(fleet.children()[slot]) == 2, f"a new child in slot {slot}", 10)
    replacement = fleet.children()[slot][1]
    assert _alive(replacement), fleet.text()

    done = log.wait_all_done(expected)
    took = time.monotonic() - killed_at
    fleet.process.send_signal(signal.SIGTERM)
    assert fleet.exit_status(30) == 0, fleet.text()

    done = log.ids("done")
    by_victim = set(log.ids("start", victim))
    unfinished = by_victim - set(log.ids("done", victim))
    assert set(done) == expected, f"lost: {sorted(expected - set(done))}"
    # A job the killed child had started may run twice (it ran, its acknowledgement did not):
    # expected. No other job may.
    assert set(_twice(done)) <= by_victim, (
        f"jobs ran twice that the killed child never started: {set(_twice(done)) - by_victim}"
    )
    assert unfinished, "the killed child had no job running"
    assert all(done[job] >= 1 for job in unfinished)
    print(
        f"\nchild {slot} (pid {victim}) SIGKILLed with {len(unfinished)} jobs unfinished; "
        f"replaced by pid {replacement}; all {len(expected)} jobs done {took:.1f} s later, "
        f"0 lost, {len(_twice(done))} ran twice (all started by the killed child)"
    )


# -- 3. a module that does not import: status 2 at once --------------------------------------


@pytest.mark.parametrize(
    ("target", "env", "error"),
    [
        (f"{APP}:worker", {"import_fails": 1}, "RuntimeError: fleet_app refuses to import"),
        ("tests.acceptance.no_such_module:worker", {}, "ModuleNotFoundError"),
    ],
    ids=["raises", "missing"],
)
def test_a_module_that_does_not_import_ends_the_fleet_with_status_2(
    sqlite_store: str,
    start_fleet: StartFleet,
    target: str,
    env: dict[str, object],
    error: str,
) -> None:
    started = time.monotonic()
    fleet, _ = start_fleet(sqlite_store, "--processes", "2", target=target, **env)
    status = fleet.exit_status(20)
    took = time.monotonic() - started

    assert status == 2, fleet.text()
    assert took < 10, f"{took:.1f} s"
    fleet.wait_closed(5)
    text = fleet.text()
    bad_input = [line for line in text.splitlines() if "(bad input" in line]
    assert len(bad_input) == 1, text
    assert "exited with status 2" in bad_input[0] and "stopping the fleet" in bad_input[0]
    assert f"varmq: cannot import '{target.partition(':')[0]}': {error}" in text, text
    assert "Traceback" not in text, text
    assert "starting a new one" not in text, text
    assert not [pid for pid in fleet.pids() if _alive(pid)], text


# -- 4. children that die at once: the supervisor gives up -----------------------------------


def test_children_that_die_at_start_make_the_supervisor_give_up_with_status_1(
    sqlite_store: str, start_fleet: StartFleet
) -> None:
    started = time.monotonic()
    fleet, _ = start_fleet(sqlite_store, "--processes", "2", target=f"{APP}:unreachable")
    status = fleet.exit_status(30)
    took = time.monotonic() - started

    assert status == 1, fleet.text()
    fleet.wait_closed(5)
    text = fleet.text()
    [give_up] = [line for line in text.splitlines() if "giving up" in line]
    assert "exited with status 3" in give_up and f"the {GIVE_UP_AFTER}th quick exit" in give_up
    slot = int(re.findall(r"child (\d+) \(pid", give_up)[0])
    backoffs = re.findall(
        rf"child {slot} \(pid \d+\) exited with status 3 after [\d.]+ s; "
        r"starting a new one in ([\d.]+) s",
        text,
    )
    assert backoffs == ["0.5", "1.0", "2.0", "4.0"], text
    assert "cannot start tests.acceptance.fleet_app:unreachable" in text
    assert "Traceback" not in text, text
    assert took < 20, f"gave up after {took:.1f} s"
    assert not [pid for pid in fleet.pids() if _alive(pid)], text
    print(f"\ngave up after {took:.1f} s, {len(fleet.pids())} children started in all")


# -- 5. the supervisor SIGKILLed: its children stop themselves -------------------------------


def test_children_of_a_sigkilled_supervisor_drain_and_stop(
    sqlite_store: str, start_fleet: StartFleet
) -> None:
    fleet, log = start_fleet(
        sqlite_store,
        "--processes",
        "2",
        "--grace",
        "10",
        job_seconds=1.0,
        concurrency=1,
        prefetch=0,
    )
    children = log.wait_ready(fleet, 2)
    _fill(sqlite_store, fleet, 10)
    _wait_until(lambda: set(log.pids("start")) == set(children), "each child to start a job")

    fleet.process.kill()
    killed_at = time.monotonic()
    assert fleet.exit_status(5) == -signal.SIGKILL
    _all_gone(children, 10)
    took = time.monotonic() - killed_at
    fleet.wait_closed(5)

    text = fleet.text()
    gone = fleet.wait_for(f"the supervisor (pid {fleet.process.pid}) is gone: stopping", 2, 1)
    assert len(gone) == 2, text
    summaries = fleet.wait_for("varmq: stopped 1 worker", count=2, timeout=1)
    assert all("after SIGTERM" in line and "0 still running" in line for line in summaries), text
    # Drained: every job a child started, it finished; none is left to a lease.
    for pid in children:
        assert set(log.ids("start", pid)) == set(log.ids("done", pid)), (pid, log.entries())
    stats = _stats(sqlite_store, fleet)
    started = len(log.ids("start"))
    assert (stats["in_flight"], stats["waiting"]) == (0, 10 - started), stats
    assert took < 5, f"the children took {took:.1f} s to stop"
    print(f"\nsupervisor SIGKILLed: both children drained and ended {took:.1f} s later")


# -- 6. SIGTERM during slow jobs, then a second SIGTERM ---------------------------------------


def test_sigterm_lets_the_children_finish_their_running_jobs_then_exits_0(
    sqlite_store: str, start_fleet: StartFleet
) -> None:
    grace = 10.0
    fleet, log = start_fleet(
        sqlite_store,
        "--processes",
        "2",
        "--grace",
        str(grace),
        job_seconds=1.5,
        concurrency=1,
        prefetch=0,
    )
    children = log.wait_ready(fleet, 2)
    _fill(sqlite_store, fleet, 6)
    _wait_until(lambda: len(log.running()) == 2, "both children to run a job")

    fleet.process.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    status = fleet.exit_status(grace + 20)
    took = time.monotonic() - signalled

    assert status == 0, fleet.text()
    _all_gone(children, 5)
    assert log.running() == {}, f"jobs left unfinished: {log.running()}"
    summaries = fleet.wait_for("varmq: stopped 1 worker", count=2, timeout=5)
    assert all("0 still running, 0 not acknowledged" in line for line in summaries), summaries
    stats = _stats(sqlite_store, fleet)
    assert (stats["in_flight"], stats["waiting"]) == (0, 6 - len(log.ids("done"))), stats
    assert took < grace, f"the children took {took:.1f} s, more than their grace"
    print(f"\nSIGTERM: the running jobs finished, the fleet exited 0 in {took:.1f} s")


def test_a_second_sigterm_makes_the_children_stop_waiting_for_their_jobs(
    sqlite_store: str, start_fleet: StartFleet
) -> None:
    fleet, log = start_fleet(
        sqlite_store,
        "--processes",
        "2",
        "--grace",
        "60",
        job_seconds=60,
        concurrency=1,
        prefetch=0,
    )
    children = log.wait_ready(fleet, 2)
    _fill(sqlite_store, fleet, 4)
    _wait_until(lambda: len(log.running()) == 2, "both children to run a job")

    fleet.process.send_signal(signal.SIGTERM)
    fleet.wait_for("SIGTERM: stopping 2 children", timeout=10)
    fleet.wait_for("SIGTERM: stopping 1 worker", count=2, timeout=10)
    fleet.process.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    status = fleet.exit_status(KILL_AFTER_FORCED + 10)
    took = time.monotonic() - signalled

    text = fleet.text()
    assert status == 1, text
    _all_gone(children, 5)
    assert "killing" not in text, text  # they stopped on their own, before the supervisor's kill
    summaries = fleet.wait_for("varmq: stopped 1 worker", count=2, timeout=5)
    assert all("1 still running" in line and "left to their leases" in line for line in summaries)
    assert log.ids("done") == Counter(), "a 60 s job finished"
    stats = _stats(sqlite_store, fleet)
    assert (stats["in_flight"], stats["waiting"]) == (2, 2), stats  # the two left to leases
    assert took < KILL_AFTER_FORCED, f"the children took {took:.1f} s after the second SIGTERM"
    print(f"\nsecond SIGTERM: the fleet exited 1 {took:.1f} s later, 2 jobs left to their leases")


# -- 7. the fleet's metrics ----------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_the_supervisors_metrics_port_serves_the_childrens_metrics_merged(
    sqlite_store: str, start_fleet: StartFleet
) -> None:
    port = _free_port()
    fleet, log = start_fleet(
        sqlite_store,
        "--processes",
        "2",
        "--metrics-port",
        str(port),
        "--metrics-host",
        "127.0.0.1",
    )
    children = log.wait_ready(fleet, 2)
    expected = _fill(sqlite_store, fleet, 100)
    done = log.wait_all_done(expected)
    ran = sum(done.values())

    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            return bytes(reply.read()).decode()

    def merged() -> tuple[str, dict[str, dict[tuple[tuple[str, str], ...], float]]] | None:
        text = scrape()
        samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = tuple(sorted(sample.labels.items()))
                samples.setdefault(sample.name, {})[labels] = sample.value
        children_up = samples.get("varmq_fleet_children", {}).get((), 0)
        completed = sum(samples.get("varmq_jobs_completed_total", {}).values())
        return (text, samples) if (children_up, completed) == (2, ran) else None

    text, samples = _wait_until(merged, f"2 children and {ran} completed jobs in the metrics", 20)
    assert samples["varmq_fleet_children_unreachable"] == {(): 0}
    concurrency = samples["varmq_worker_concurrency"]
    assert sorted(dict(labels)["child"] for labels in concurrency) == ["1", "2"], concurrency
    assert sum(samples["varmq_job_duration_seconds_count"].values()) == ran
    families = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    doubled = sorted(name for name, n in Counter(families).items() if n > 1)
    assert doubled == [], f"metric families exposed twice: {doubled}"

    fleet.process.send_signal(signal.SIGTERM)
    assert fleet.exit_status(30) == 0, fleet.text()
    _all_gone(children, 5)


# -- 8. bad --processes -----------------------------------------------------------------------


@pytest.mark.parametrize("count", ["0", "abc"])
def test_a_bad_process_count_exits_2_with_one_line(
    count: str, processes: list[subprocess.Popen[str]]
) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "varmq", "worker", f"{APP}:worker", "--processes", count],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    processes.append(process)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 2, err
    assert out == ""
    assert err.splitlines() == [
        f"varmq: --processes takes a count of at least 1 or auto, got '{count}'"
    ], err


# -- 9. varmq.run(factory, processes=N) from a script ------------------------------------------

_SCRIPT = """
import sys

sys.path[:0] = [{root!r}, {adapters!r}]

import varmq
from tests.acceptance import fleet_app


def make_workers():
    return fleet_app.worker()


if __name__ == "__main__":
    sys.exit(varmq.run(make_workers, processes=2, grace=10))
"""


def test_varmq_run_with_processes_supervises_a_scripts_factory(
    sqlite_store: str, processes: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    script = tmp_path / "consume.py"
    script.write_text(_SCRIPT.format(root=str(ROOT), adapters=str(ROOT / "adapters")))
    log = tmp_path / "jobs.log"
    queue = f"fleet-run-{os.getpid()}-{time.monotonic_ns()}"
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("FLEET_", "VARMQ_"))}
    environ |= {"FLEET_STORE": sqlite_store, "FLEET_QUEUE": queue, "FLEET_LOG": str(log)}
    process = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=environ,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    processes.append(process)
    fleet = Fleet(process, queue)
    try:
        jobs = JobLog(log)
        # The script configures no logging: its children are known by their "ready" lines.
        children = _wait_until(
            lambda: sorted(jobs.pids("ready")) if len(jobs.pids("ready")) >= 2 else None,
            "2 children to be ready",
        )
        assert process.pid not in children
        expected = _fill(sqlite_store, fleet, 40)
        done = jobs.wait_all_done(expected)
        assert _twice(done) == []
        process.send_signal(signal.SIGTERM)
        assert fleet.exit_status(DEADLINE) == 0, fleet.text()
        _all_gone(children, DEADLINE)
    finally:
        fleet.kill_everything()
