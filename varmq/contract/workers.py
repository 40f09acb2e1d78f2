"""Worker records: what a worker tells a store about itself, and what ``store.workers()`` shows.

A worker bound to a storage queue keeps one record in that queue's store
(:class:`~varmq.contract.protocols.IWorkerRegistry`): the JSON object :func:`encode_worker`
writes, which the store keeps as opaque bytes beside the times it stamps on its own clock
(``started_at``, ``last_seen``, and when the record runs out). :func:`worker_infos` turns what
a store lists (:class:`~varmq.contract.protocols.StoredWorkerRecord`) into
:class:`WorkerInfo` values, the shape every adapter's ``Queues.workers()`` returns.

The timings every party agrees on are here: a worker refreshes its record every
:data:`REFRESH_SECONDS`, a store shows it as gone (``alive=False``) once
:data:`EXPIRES_AFTER` passed without a refresh (three missed refreshes), and drops it from
its listing :data:`GONE_KEPT` seconds after that. Standard library only; no I/O here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "EXPIRES_AFTER",
    "GONE_KEPT",
    "REFRESH_SECONDS",
    "WorkerInfo",
    "encode_worker",
    "worker_infos",
]

REFRESH_SECONDS = 5.0
"""Seconds between two refreshes of a worker's record (on its queue's lease renewal thread)."""
EXPIRES_AFTER = 3 * REFRESH_SECONDS
"""Seconds after its last refresh that a record shows its worker as gone: three missed ones."""
GONE_KEPT = 3600.0
"""Seconds a gone worker's record is still listed (``alive=False``) before the store drops it."""


@dataclass(frozen=True)
class WorkerInfo:
    """One worker consuming a store's queues, in any process, as the store last heard of it.

    ``id`` is unique per worker object (a new process, a new id); ``name`` is the worker's name
    (``""`` if it has none); ``host`` and ``pid`` say where it runs; ``queues`` are the names
    of the store's queues it binds; ``concurrency`` its limit; ``running`` the jobs it ran at
    its last refresh, ``completed`` and ``failed`` its counters then (since the worker was
    made). ``started_at`` (its first record) and ``last_seen`` (its last refresh) are Unix
    seconds on the store's clock (the server's for Redis). ``alive`` is ``False`` once the
    worker missed a few refreshes (a killed process, a lost connection): it is gone, not
    merely idle. A worker that stopped cleanly removed its record.
    """

    id: str
    name: str
    host: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    started_at: float
    last_seen: float
    running: int
    completed: int
    failed: int
    alive: bool = True

    def as_dict(self) -> dict[str, Any]:
        """The record as JSON-ready values (``queues`` a list), for operator tools."""
        return {
            "id": self.id,
            "name": self.name,
            "host": self.host,
            "pid": self.pid,
            "queues": list(self.queues),
            "concurrency": self.concurrency,
            "started_at": self.started_at,
            "last_seen": self.last_seen,
            "running": self.running,
            "completed": self.completed,
            "failed": self.failed,
            "alive": self.alive,
        }


def encode_worker(
    *,
    worker_id: str,
    name: str,
    host: str,
    pid: int,
    queues: Sequence[str],
    concurrency: int,
    running: int,
    completed: int,
    failed: int,
) -> bytes:
    """The bytes a worker registers: its fields as one JSON object (no times: the store's)."""
    return json.dumps(
        {
            "id": worker_id,
            "name": name,
            "host": host,
            "pid": pid,
            "queues": list(queues),
            "concurrency": concurrency,
            "running": running,
            "completed": completed,
            "failed": failed,
        },
        separators=(",", ":"),
    ).encode()


def worker_infos(stored: Iterable[Any]) -> list[WorkerInfo]:
    """The :class:`WorkerInfo` of each stored record (``StoredWorkerRecord`` dicts), living ones
    first, then by name, host and pid. A record whose bytes do not decode is left out (a
    process of a later version may write fields this one does not know; unknown fields are
    ignored)."""
    infos = [info for info in (_info(record) for record in stored) if info is not None]
    infos.sort(key=lambda w: (not w.alive, w.name, w.host, w.pid, w.id))
    return infos


def _info(stored: Any) -> WorkerInfo | None:
    try:
        fields = json.loads(bytes(stored["record"]))
        return WorkerInfo(
            id=str(stored["id"]),
            name=str(fields.get("name", "")),
            host=str(fields.get("host", "")),
            pid=int(fields.get("pid", 0)),
            queues=tuple(str(q) for q in fields.get("queues", ())),
            concurrency=int(fields.get("concurrency", 0)),
            started_at=float(stored["started_at"]),
            last_seen=float(stored["last_seen"]),
            running=int(fields.get("running", 0)),
            completed=int(fields.get("completed", 0)),
            failed=int(fields.get("failed", 0)),
            alive=bool(stored["alive"]),
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
