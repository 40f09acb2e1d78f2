"""Acceptance: a process killed with SIGKILL while it saves a snapshot leaves a whole file.

A child process (tests/acceptance/snapshot_saver.py) saves a 50,000-job queue to one file
again and again, each generation different in every job; it is killed with SIGKILL 50 times:
half at a random moment of its saves (mostly while it encodes, the longest step), half
within 3 ms of its temporary file appearing (while it writes, fsyncs and renames, a few ms).
After each kill the file loads and is exactly the old one (the generation before the save
under way) or the new one, and nothing else is left in the directory but at most one temporary
file of an interrupted save: the next save (of the next child) or load (by this test, every
other time) removes those of killed processes, and the last save leaves none.
"""

from __future__ import annotations

import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import varmq
from varmq.api import snapshot_format

pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).resolve().parents[2]
JOBS = 50_000
KILLS = 50
WAIT = 60.0  # seconds a child may take to get ready or to start a save, on a loaded machine


class Child:
    """One saver process and the lines it printed, read by a thread of its own."""

    def __init__(self, path: Path, first: int) -> None:
        command = [sys.executable, "-m", "tests.acceptance.snapshot_saver"]
        self.process = subprocess.Popen(
            [*command, str(path), str(JOBS), str(first)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name="test:snapshot-saver-stdout")
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.strip())

    def next_line(self) -> str:
        return self.lines.get(timeout=WAIT)

    def kill(self) -> list[str]:
        """SIGKILL it; the lines it printed that were not read yet."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=WAIT)
        self._reader.join(timeout=WAIT)
        rest = []
        while not self.lines.empty():
            rest.append(self.lines.get_nowait())
        return rest


def generation_of(path: Path, load: bool) -> int:
    """The one generation the whole file holds; fails unless every job is there, in order.

    Read with ``load_queues`` (which removes the temporary files of killed saves), or else
    decoded only, leaving them for the next save to remove."""
    if load:
        loaded = varmq.load_queues(path)
    else:
        loaded = snapshot_format.decode(path.read_bytes(), str(path))
    assert list(loaded) == ["jobs"]
    jobs = loaded["jobs"].values()
    assert [job.id for job in jobs] == [f"j{n}" for n in range(JOBS)]
    assert [job.data["i"] for job in jobs] == list(range(JOBS))
    generations = {job.data["g"] for job in jobs}
    assert len(generations) == 1, f"a file mixing generations {sorted(generations)}"
    return generations.pop()


def temporary_files(directory: Path, path: Path) -> list[Path]:
    """The files beside ``path``: only temporary files of saves of it (``.NAME.PID.HEX.tmp``)."""
    strays = [p for p in directory.iterdir() if p != path]
    pattern = re.compile(rf"\.{re.escape(path.name)}\.\d+\.[0-9a-f]{{8}}\.tmp")
    assert all(pattern.fullmatch(p.name) for p in strays), strays
    return strays


def wait_for_a_temporary_file(directory: Path, path: Path, pid: int) -> None:
    """Return as soon as a save by ``pid`` wrote its temporary file (polled: nothing to wait
    on)."""
    prefix = f".{path.name}.{pid}."
    deadline = time.monotonic() + WAIT
    while not any(p.name.startswith(prefix) for p in directory.iterdir()):
        assert time.monotonic() < deadline, "no save started writing"
        time.sleep(0.0005)  # the write takes a few ms: look often, leave the CPU to the child


def test_a_saver_killed_at_random_moments_leaves_the_old_file_or_the_new_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "queues.json"
    rng = random.Random(20240601)
    started = time.monotonic()
    on_disk = -1  # the generation the file holds; none yet
    save_time = 0.5  # seconds one save takes; updated from what the children report
    seen = {"unchanged": 0, "advanced": 0, "mid-write": 0}
    for kill in range(KILLS):
        child = Child(path, on_disk + 1)
        try:
            assert child.next_line() == "ready"
            assert child.next_line() == f"saving {on_disk + 1}"
            if kill % 2:
                wait_for_a_temporary_file(tmp_path, path, child.process.pid)
                time.sleep(rng.uniform(0, 0.003))
            else:
                time.sleep(rng.uniform(0, 1.5 * save_time))  # a random moment of some save
            lines = child.kill()
        finally:
            if child.process.poll() is None:
                child.process.kill()
        for line in lines:
            if line.startswith("saved "):
                save_time = float(line.split()[2])
        begun = max(
            [int(line.split()[1]) for line in lines if line.startswith("saving ")],
            default=on_disk + 1,
        )
        strays = temporary_files(tmp_path, path)
        # The child's save removed what earlier kills left before it wrote its own, if it did.
        assert len(strays) <= 1, strays
        seen["mid-write"] += any(f".{child.process.pid}." in p.name for p in strays)
        by_load = kill % 4 < 2  # else the next child's save removes the stray
        found = generation_of(path, by_load) if path.exists() else -1
        if by_load:
            if found == -1:  # killed in its first save: the loader still removes the stray
                assert varmq.load_queues(path, missing_ok=True) == {}
            assert temporary_files(tmp_path, path) == []
        # The old file (the one saved before the save under way) or the new one (that save's).
        assert found in (begun - 1, begun), f"the file holds {found}; the child had begun {begun}"
        assert found >= on_disk
        seen["unchanged" if found == on_disk else "advanced"] += 1
        on_disk = found
    # The next save, in this process, removes what the last kill left.
    saver = varmq.new_worker(lambda job: None, auto_run=False)
    [last] = snapshot_format.decode(path.read_bytes(), str(path)).values()  # no load: it cleans
    varmq.save_queues([saver.with_queue(last)], path)
    assert temporary_files(tmp_path, path) == []
    elapsed = time.monotonic() - started
    print(f"{KILLS} kills in {elapsed:.1f} s: {seen}")
    assert seen["unchanged"] and seen["advanced"] and seen["mid-write"], seen
