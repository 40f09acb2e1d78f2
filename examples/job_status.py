"""Follow a job by id from anywhere: POST starts it, GET polls or waits for it, DELETE cancels it.

Shows: a queue opened with ``keep_results`` (its storage keeps a record of every job added with
an id), a consumer (a result worker) and a web app that only produces and reads
(``varmq.new_distributed_queue``, no worker): ``await handle.add_async(..., job_id=...)`` on POST,
``await handle.result_of_async(job_id, timeout)`` and ``await handle.job_async(job_id)`` on GET,
``await handle.cancel_async(job_id)`` on DELETE, for a job that waits and for one that runs.

The consumer and the app open the queue through two queue objects of one store, as two
processes would. The store here is ``varmq.testing.MemoryStorage``, the reference storage, so
that the script runs anywhere with no server; on a real deployment each process opens the same
queue of a shared store, with the same calls::

    queues = sqliteq.new("jobs.db")                  # or redisq.new("redis://...")
    q = queues.new_distributed_queue("reports", keep_results=3600)

(see docs/results.md for what each store keeps, and for how long.)

Run it as a script: it serves a few requests in-process through ``httpx`` and checks the
answers (that is what the tests do)::

    python examples/job_status.py
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "adapters")]  # run from a plain checkout

import httpx  # noqa: E402  (after the path set-up above)
from fastapi import FastAPI, HTTPException  # noqa: E402

import varmq  # noqa: E402
from varmq.testing import MemoryStorage  # noqa: E402

KEEP = 3600.0  # seconds a finished job's record is kept
LEASE = 3.0  # visibility_timeout: a running job hears of a cancel within LEASE / 3 seconds


async def build_report(job: varmq.Job[dict[str, Any]]) -> dict[str, Any]:
    """The job: what it returns is kept in the job's record, for any process to read."""
    if job.data.get("kind") not in ("sales", "stock"):
        raise ValueError(f"no such report: {job.data.get('kind')!r}")
    await asyncio.sleep(job.data.get("seconds", 0.01))  # the real work
    return {"kind": job.data["kind"], "rows": 42}


def start_consumer(store: MemoryStorage) -> varmq.ResultWorker[Any, Any]:
    """The consumer process: a result worker on the queue."""
    worker: varmq.ResultWorker[Any, Any] = varmq.new_result_worker(build_report, 4)
    q = store.new_distributed_queue("reports", keep_results=KEEP, visibility_timeout=LEASE)
    worker.with_distributed_queue(q)
    return worker


def create_app(store: MemoryStorage) -> FastAPI:
    """The web process: adds jobs, reads their records and cancels them; runs no job."""
    q = store.new_distributed_queue("reports", keep_results=KEEP, visibility_timeout=LEASE)
    reports = varmq.new_distributed_queue(q)
    app = FastAPI()

    @app.post("/reports", status_code=202)
    async def start_report(body: dict[str, Any]) -> dict[str, str]:
        job_id = uuid.uuid4().hex
        await reports.add_async(body, job_id=job_id, strict=True)
        return {"id": job_id}

    @app.get("/reports/{job_id}")
    async def report_status(job_id: str, wait: float = 0.0) -> dict[str, Any]:
        if wait > 0:  # long polling: answer as soon as the job ends, or after `wait` seconds
            try:
                await reports.result_of_async(job_id, timeout=wait)
            except (TimeoutError, varmq.JobFailedError):
                pass  # still running, or it failed: the record below says which
            except varmq.JobNotFoundError:
                raise HTTPException(404, f"no job {job_id}") from None
        record = await reports.job_async(job_id)
        if record is None:
            raise HTTPException(404, f"no job {job_id}")
        return dataclasses.asdict(record)

    @app.delete("/reports/{job_id}")
    async def cancel_report(job_id: str) -> dict[str, bool]:
        if not await reports.cancel_async(job_id):
            raise HTTPException(409, f"job {job_id} is not queued or running")
        return {"cancelled": True}

    return app


async def self_check() -> None:
    store = MemoryStorage()
    consumer = start_consumer(store)
    app = create_app(store)
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:

            async def post(body: dict[str, Any]) -> str:
                answer = await client.post("/reports", json=body)
                assert answer.status_code == 202, answer.text
                return str(answer.json()["id"])

            async def get(job_id: str, wait: float = 0.0) -> dict[str, Any]:
                answer = await client.get(f"/reports/{job_id}", params={"wait": wait})
                assert answer.status_code == 200, answer.text
                return dict(answer.json())

            # Succeeded: long-poll until the end, then the result is in the record.
            job_id = await post({"kind": "sales"})
            done = await get(job_id, wait=5)
            assert done["state"] == "succeeded" and done["result"] == {"kind": "sales", "rows": 42}
            print(f"sales report {job_id[:8]}: {done['state']}, result {done['result']}")

            # Failed: the record keeps the error's type and message (never a pickled object).
            job_id = await post({"kind": "weather"})
            failed = await get(job_id, wait=5)
            assert failed["state"] == "failed" and failed["error"]["type"] == "ValueError"
            print(f"weather report: {failed['state']}, {failed['error']['message']}")

            # Cancelled while it waited: a job delayed by the producer never runs.
            later = uuid.uuid4().hex
            reports = varmq.new_distributed_queue(
                store.new_distributed_queue("reports", keep_results=KEEP)
            )
            assert reports.add({"kind": "stock"}, job_id=later, delay=60)
            assert (await get(later))["state"] == "delayed"
            assert (await client.delete(f"/reports/{later}")).json() == {"cancelled": True}
            print(f"delayed report: {(await get(later))['state']}")

            # Cancelled while it ran: its worker hears of it at the next lease renewal and
            # cancels the coroutine, as a timeout would.
            job_id = await post({"kind": "stock", "seconds": 30})
            while (await get(job_id))["state"] != "running":
                await asyncio.sleep(0.01)
            assert (await client.delete(f"/reports/{job_id}")).status_code == 200
            cancelled = await get(job_id, wait=5)
            assert cancelled["state"] == "cancelled", cancelled
            print(f"long report: {cancelled['state']} while it ran")

            # Nothing to cancel once it ended; nothing at all for an id never added.
            assert (await client.delete(f"/reports/{job_id}")).status_code == 409
            assert (await client.get("/reports/no-such-job")).status_code == 404
    finally:
        consumer.stop_and_wait()
        store.close()


if __name__ == "__main__":
    asyncio.run(self_check())
