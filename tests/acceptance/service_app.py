"""The service module ``tests/acceptance/test_service.py`` runs with ``varmq worker``.

Configured through the environment, as a deployed service is: ``SERVICE_STORE`` (``sqlite:PATH``
or a Redis URL), ``SERVICE_QUEUE`` and ``SERVICE_LOG`` (a file each job appends its start and
end to, with the wall time, one ``os.write`` per line so lines stay whole).
"""

from __future__ import annotations

import os
import time
from typing import Any

import varmq
from tests.acceptance.actors import open_store

# Long, so that a job only comes back sooner than this if the stopping worker handed it back.
VISIBILITY_TIMEOUT = 60.0
JOB_SECONDS = 0.05

_store = open_store(os.environ["SERVICE_STORE"])
_log = os.open(os.environ["SERVICE_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def _note(what: str) -> None:
    os.write(_log, f"{time.time():.6f} {what}\n".encode())


def work(job: varmq.Job[Any]) -> None:
    _note(f"start {job.id}")
    time.sleep(JOB_SECONDS)
    _note(f"done {job.id}")


def _ready() -> None:
    _note("ready")


def _closed() -> None:
    _store.close()


# Concurrency 4 and a prefetch of 8: on SIGTERM up to 8 jobs are taken but not started.
worker = varmq.new_worker(
    work, 4, prefetch=8, auto_run=False, on_startup=_ready, on_shutdown=_closed
)
worker.with_distributed_queue(
    _store.new_distributed_queue(os.environ["SERVICE_QUEUE"], visibility_timeout=VISIBILITY_TIMEOUT)
)


def two_workers() -> list[varmq.Worker[Any, None]]:
    """A busy worker and an idle one sharing ``_store``, each closing it in ``on_shutdown``, as
    docs/deploy.md shows: the idle one stops first, and its hook must not close the store
    under the busy one's running jobs. Jobs take ``SERVICE_JOB_SECONDS``."""
    seconds = float(os.environ.get("SERVICE_JOB_SECONDS", JOB_SECONDS))

    def slow(job: varmq.Job[Any]) -> None:
        _note(f"start {job.id}")
        time.sleep(seconds)
        _note(f"done {job.id}")

    busy = varmq.new_worker(slow, 4, prefetch=8, auto_run=False, on_shutdown=_closed)
    busy.with_distributed_queue(
        _store.new_distributed_queue(
            os.environ["SERVICE_QUEUE"], visibility_timeout=VISIBILITY_TIMEOUT
        )
    )
    idle = varmq.new_worker(slow, 1, auto_run=False, on_startup=_ready, on_shutdown=_closed)
    idle.with_distributed_queue(_store.new_distributed_queue(os.environ["SERVICE_QUEUE"] + "-idle"))
    return [busy, idle]
