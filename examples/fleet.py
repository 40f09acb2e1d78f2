"""Every core: a fleet of consumer processes under one supervisor.

The module-level ``worker`` computes (pure Python, so threads of one process would share one
GIL) on the jobs of the SQLite queue ``sums`` in ``$JOBS_DB``. Run it on every core::

    varmq worker examples.fleet:worker --processes auto --grace 30

As a script, it starts that command with two processes on a temporary file, adds 40 jobs,
waits until each ran once, prints how many each process ran, sends SIGTERM to the supervisor
(which forwards it to both children) and prints the exit status (0: every child drained)::

    python examples/fleet.py
"""

# example: timeout 90

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "adapters")]  # run from a plain checkout

import sqliteq  # noqa: E402
import varmq  # noqa: E402

DATABASE = os.environ.get("JOBS_DB", "jobs.db")
DONE_LOG = os.environ.get("FLEET_DONE_LOG")  # the script's way of seeing what ran where


def _sum_of_squares(job: varmq.Job[Any]) -> int:
    total = sum(i * i for i in range(job.data["n"]))  # a few ms of pure Python
    if DONE_LOG:
        with open(DONE_LOG, "a", encoding="ascii") as log:
            log.write(f"{job.id} {os.getpid()}\n")
    return total


def _make_worker() -> varmq.Worker[Any]:
    store = sqliteq.new(DATABASE)
    made = varmq.new_worker(_sum_of_squares, 2, auto_run=False, on_shutdown=store.close)
    made.with_distributed_queue(store.new_distributed_queue("sums"))
    return made


worker = _make_worker


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch:
        database = str(Path(scratch, "jobs.db"))
        done_log = Path(scratch, "done.log")
        done_log.touch()
        env = {**os.environ, "JOBS_DB": database, "FLEET_DONE_LOG": str(done_log)}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "adapters")])
        command = [sys.executable, "-m", "varmq", "worker", "examples.fleet:worker"]
        fleet = subprocess.Popen(
            [*command, "--processes", "2", "--grace", "10", "--log-level", "warning"],
            cwd=ROOT,
            env=env,
        )
        store = sqliteq.new(database)
        sums = varmq.new_distributed_queue(store.new_distributed_queue("sums"))
        for i in range(40):
            sums.add({"n": 150_000 + i}, job_id=f"sum-{i}")
        deadline = time.monotonic() + 60
        ran: list[str] = []
        while time.monotonic() < deadline:
            ran = done_log.read_text(encoding="ascii").split("\n")[:-1]
            if len(ran) >= 40:
                break
            time.sleep(0.05)  # a demo polling a file; the library itself never polls so
        store.close()
        per_process = Counter(line.split()[1] for line in ran)
        print(f"{len(ran)} jobs ran, by process: {dict(per_process)}")
        fleet.send_signal(signal.SIGTERM)
        status = fleet.wait(60)
        print(f"supervisor exited {status}")
        ids = Counter(line.split()[0] for line in ran)
        assert len(ids) == 40 and max(ids.values()) == 1, ids
        return status


if __name__ == "__main__":
    sys.exit(main())
