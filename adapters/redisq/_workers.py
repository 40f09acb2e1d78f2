"""The records of the workers consuming a Redis's queues: :class:`WorkerRegistry`.

``IWorkerRegistry`` of ``varmq.contract.protocols`` ("Workers seen from anywhere"), the
``worker_registry`` of every queue of one ``Queues``. Every call is one command of
``workers.lua`` (key layout at its top; keys from :data:`redisq._keys.WORKER_KEYS`, one hash tag,
so it works on Redis Cluster), on the server's clock unless ``redisq.new`` was given a test clock:
hosts with skewed clocks agree on who is gone. A call that fails raises
:class:`~redisq.errors.RedisUnavailableError` naming the operation and the server.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Callable
from typing import Any, Final

from varmq.contract.protocols import StoredWorkerRecord
from varmq.contract.rules import as_bytes
from varmq.contract.workers import GONE_KEPT

from ._health import Health
from ._keys import WORKER_KEYS
from ._script import Client
from .errors import FAILURES

__all__ = ["WorkerRegistry"]

_SCRIPT_TEXT: Final = importlib.resources.files("redisq").joinpath("workers.lua").read_text("utf-8")
_KEPT_MS: Final = round(GONE_KEPT * 1000)


class WorkerRegistry:
    """The worker records of one Redis (see the module's docstring). ``closed`` is set once by
    ``Queues.close()``: from then on a registration reaches nothing, a removal answers
    ``False`` and a listing is empty."""

    def __init__(self, client: Client, health: Health, clock: Callable[[], int] | None) -> None:
        self._script = client.register_script(_SCRIPT_TEXT)
        self._health = health
        self._clock = clock
        self.closed = False

    def register_worker(self, worker_id: str, record: bytes, expires_after: float) -> None:
        """Store or replace the record of ``worker_id``, seen now on the server's clock."""
        data = as_bytes(f"redisq: {self._health.where}: register_worker", record)
        ttl = max(round(float(expires_after) * 1000), 0)
        self._run("register_worker", "register", worker_id, data, ttl, _KEPT_MS)

    def remove_worker(self, worker_id: str) -> bool:
        """Delete the record of ``worker_id``; whether there was one."""
        return bool(self._run("remove_worker", "remove", worker_id) or 0)

    def worker_records(self) -> list[StoredWorkerRecord]:
        """Every record kept, living or gone for less than ``GONE_KEPT`` seconds."""
        answer = self._run("workers", "list", _KEPT_MS)
        if not answer:
            return []
        now, flat = int(answer[0]), answer[1:]
        records = []
        for worker_id, value in zip(flat[0::2], flat[1::2], strict=True):
            started, seen, expires, record = bytes(value).split(b" ", 3)
            records.append(
                StoredWorkerRecord(
                    id=_text(worker_id),
                    record=record,
                    started_at=int(started) / 1000,
                    last_seen=int(seen) / 1000,
                    alive=int(expires) > now,
                )
            )
        return records

    def _run(self, operation: str, command: str, *args: bytes | str | int) -> Any:
        if self.closed:
            return None
        now = "" if self._clock is None else str(int(self._clock()))
        try:
            result = self._script(keys=WORKER_KEYS, args=(command, now, *args))
        except FAILURES as exc:
            raise self._health.failed("", operation, exc) from exc
        self._health.ok()
        return result


def _text(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value
