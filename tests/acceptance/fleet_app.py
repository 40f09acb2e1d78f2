"""The module ``tests/acceptance/test_fleet_processes.py`` runs with
``varmq worker ... --processes N``: each child of the supervisor imports it.

Configured through the environment, which the supervisor hands to every child:
``FLEET_STORE`` (``sqlite:PATH`` or a ``redis://`` URL), ``FLEET_QUEUE``, ``FLEET_LOG`` (a file
each job appends ``start ID PID`` and ``done ID PID`` to, one ``os.write`` per line so that
lines stay whole across processes; a worker appends ``ready PID`` once started), and optionally
``FLEET_JOB_SECONDS`` (each job's sleep, default 0.01), ``FLEET_CONCURRENCY`` (default 2),
``FLEET_PREFETCH`` (default: the worker's) and ``FLEET_LEASE`` (the visibility timeout,
default 30 s).

The targets:

- ``worker``: a factory returning the worker above (the store is opened in the child, once the
  supervisor started it);
- ``unreachable``: a factory raising ``ConnectionRefusedError``, as a store down at start-up
  would: the child exits 3 (busy, not bad input) at once, every time;
- the module itself raises at import when ``FLEET_IMPORT_FAILS`` is set: the child exits 2.
"""

from __future__ import annotations

import os
import time
from typing import Any

import varmq
from tests.acceptance.actors import open_store

__all__ = ["unreachable", "worker"]

if os.environ.get("FLEET_IMPORT_FAILS"):
    raise RuntimeError("fleet_app refuses to import: FLEET_IMPORT_FAILS is set")


def worker() -> varmq.Worker[Any]:
    """The worker of one child: ``FLEET_QUEUE`` of ``FLEET_STORE``, each job logged."""
    store = open_store(os.environ["FLEET_STORE"])
    log = os.open(os.environ["FLEET_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    seconds = float(os.environ.get("FLEET_JOB_SECONDS", "0.01"))
    pid = os.getpid()

    def note(line: str) -> None:
        os.write(log, f"{line}\n".encode())

    def work(job: varmq.Job[Any]) -> None:
        note(f"start {job.id} {pid}")
        time.sleep(seconds)
        note(f"done {job.id} {pid}")

    prefetch = os.environ.get("FLEET_PREFETCH")
    made = varmq.new_worker(
        work,
        int(os.environ.get("FLEET_CONCURRENCY", "2")),
        auto_run=False,
        poll_interval=0.05,
        on_startup=lambda: note(f"ready {pid}"),
        on_shutdown=store.close,
        prefetch=None if prefetch is None else int(prefetch),  # None: the worker's default
    )
    made.with_distributed_queue(
        store.new_distributed_queue(
            os.environ["FLEET_QUEUE"],
            visibility_timeout=float(os.environ.get("FLEET_LEASE", "30")),
        )
    )
    return made


def unreachable() -> varmq.Worker[Any]:
    """A store that does not answer at start-up: the child exits 3, however often it starts."""
    raise ConnectionRefusedError(111, "fleet_app: the store does not answer")
