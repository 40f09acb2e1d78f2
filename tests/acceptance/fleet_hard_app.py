"""The module ``tests/acceptance/test_fleet_hard_timeout.py`` runs with ``varmq worker ...
--processes N --hard-timeout S``: each child of the supervisor imports it.

Configured as ``tests/acceptance/fleet_app.py`` is, through the environment the supervisor hands
to every child (``FLEET_STORE``, ``FLEET_QUEUE``, ``FLEET_LOG``, ``FLEET_JOB_SECONDS``,
``FLEET_CONCURRENCY``), with the same job log (``start ID PID``, ``done ID PID``, ``ready PID``,
one ``os.write`` per line), so that the fleet tests' ``JobLog`` reads it. What differs: the
worker gives each job :data:`TIMEOUT` seconds and one attempt (a job that fails, a timeout
included, is dead-lettered); it has no ``hard_timeout`` of its own, so ``--hard-timeout`` gives
it one; and a job whose id starts with ``hang`` never returns by itself (``threading.Event().
wait(60)``, a C call), which past its timeout plus the hard timeout ends its child with status 4.
Records are kept (``keep_results``), so the test can read each job's state.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import varmq
from tests.acceptance.actors import open_store

__all__ = ["HANG_SECONDS", "TIMEOUT", "worker"]

TIMEOUT = 0.3
"""Every job's timeout, seconds (the worker's ``timeout``)."""
HANG_SECONDS = 60.0
"""How long a ``hang*`` job's function waits: far beyond any deadline of the test."""
# Long: a job that runs again sooner than this was handed back, not left to its lease.
VISIBILITY_TIMEOUT = 60.0


def worker() -> varmq.Worker[Any]:
    """The worker of one child: ``FLEET_QUEUE`` of ``FLEET_STORE``, each job logged."""
    store = open_store(os.environ["FLEET_STORE"])
    log = os.open(os.environ["FLEET_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    seconds = float(os.environ.get("FLEET_JOB_SECONDS", "0.05"))
    pid = os.getpid()

    def note(line: str) -> None:
        os.write(log, f"{line}\n".encode())

    def work(job: varmq.Job[Any]) -> None:
        note(f"start {job.id} {pid}")
        if job.id.startswith("hang"):
            threading.Event().wait(HANG_SECONDS)  # ignores its timeout
        else:
            time.sleep(seconds)
        note(f"done {job.id} {pid}")

    made = varmq.new_worker(
        work,
        int(os.environ.get("FLEET_CONCURRENCY", "2")),
        name="fleet-hard",
        auto_run=False,
        poll_interval=0.05,
        timeout=TIMEOUT,
        retry=varmq.Retry(max_attempts=1, jitter=False),
        on_startup=lambda: note(f"ready {pid}"),
        on_shutdown=store.close,
    )
    made.with_distributed_queue(
        store.new_distributed_queue(
            os.environ["FLEET_QUEUE"], visibility_timeout=VISIBILITY_TIMEOUT, keep_results=600
        )
    )
    return made
