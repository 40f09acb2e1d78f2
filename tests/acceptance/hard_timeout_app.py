"""The service module ``tests/acceptance/test_hard_timeout_processes.py`` runs with ``varmq
worker``: a worker whose ``stuck`` job ignores its timeout.

Configured through the environment: ``SERVICE_STORE`` (``sqlite:PATH`` or a Redis URL),
``SERVICE_QUEUE``, ``SERVICE_LOG`` (a file each job appends ``start|done ID ATTEMPT`` to, with
the wall time, one ``os.write`` per line), ``HARD_STUCK`` (how the first attempt of a job whose
id starts with ``stuck`` hangs: ``sleep``, ``time.sleep(60)``, or ``wait``, an
``threading.Event().wait()`` that never ends) and ``HARD_ATTEMPTS`` (the retry policy's
``max_attempts``). A job ``slow*`` runs ``SLOW_SECONDS``, well within any limit; the others
50 ms. Later attempts of ``stuck*`` return at once.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import varmq
from tests.acceptance.actors import open_store

# Long: a job that comes back sooner than this was handed back, not left to its lease.
VISIBILITY_TIMEOUT = 60.0
SLOW_SECONDS = 3.0
HARD_TIMEOUT = 0.5

_store = open_store(os.environ["SERVICE_STORE"])
_log = os.open(os.environ["SERVICE_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
_stuck = os.environ.get("HARD_STUCK", "sleep")


def _note(what: str) -> None:
    os.write(_log, f"{time.time():.6f} {what}\n".encode())


def work(job: varmq.Job[Any]) -> None:
    _note(f"start {job.id} {job.attempt}")
    if job.id.startswith("stuck") and job.attempt == 1:
        if _stuck == "wait":
            threading.Event().wait()  # in a C call (a lock's acquire), for ever
        else:
            time.sleep(60)
    elif job.id.startswith("slow"):
        time.sleep(SLOW_SECONDS)
    else:
        time.sleep(0.05)
    _note(f"done {job.id} {job.attempt}")


def _ready() -> None:
    _note("ready")


def _closed() -> None:
    _store.close()


worker = varmq.new_worker(
    work,
    3,
    name="hard",
    auto_run=False,
    hard_timeout=HARD_TIMEOUT,
    retry=varmq.Retry(
        max_attempts=int(os.environ.get("HARD_ATTEMPTS", "1")), backoff=0.2, jitter=False
    ),
    on_startup=_ready,
    on_shutdown=_closed,
)
worker.with_distributed_queue(
    _store.new_distributed_queue(
        os.environ["SERVICE_QUEUE"], visibility_timeout=VISIBILITY_TIMEOUT, keep_results=600
    )
)
