"""A FastAPI service that queues jobs on POST and runs them on its own event loop.

Shows: the lifespan pattern (``worker.serve()`` starts with the app and runs the worker's
``async def`` jobs on the app's loop, so they share its clients; shutdown drains, then stops),
``await handle.add_async(...)`` from a request handler (never blocks the loop), and durable jobs
in a SQLite file that a restart does not lose.

Serve it::

    uvicorn examples.fastapi_app:app           # POST /emails {"to": "a@example.com"}

or run it as a script, which serves a few requests in-process through ``httpx`` and checks the
answers (that is what the tests do)::

    python examples/fastapi_app.py
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "adapters")]  # run from a plain checkout

import httpx  # noqa: E402  (after the path set-up above)
from fastapi import FastAPI  # noqa: E402

import sqliteq  # noqa: E402
import varmq  # noqa: E402

DATABASE = os.environ.get("EMAILS_DB", "emails.db")
SENT: list[str] = []  # what the job function did, for the self-check below


class Mailer:
    """Stands for a client the app creates on its loop (an httpx.AsyncClient, a DB pool)."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()

    async def send(self, to: str) -> None:
        assert asyncio.get_running_loop() is self.loop, "used on another loop"
        await asyncio.sleep(0.01)  # the network call
        SENT.append(to)


def create_app(database: str = DATABASE) -> FastAPI:
    """The app: one worker (concurrency 8) on a durable queue in ``database``."""
    queues = sqliteq.new(database)
    mailer: Mailer | None = None

    async def send_email(job: varmq.Job[dict[str, Any]]) -> None:
        assert mailer is not None
        await mailer.send(job.data["to"])

    worker = varmq.new_worker(send_email, 8, name="emails", auto_run=False)
    emails = worker.with_distributed_queue(queues.new_distributed_queue("emails"))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        nonlocal mailer
        mailer = Mailer()  # made on the app's loop, used by the jobs on that same loop
        serving = asyncio.create_task(worker.serve())
        try:
            yield
        finally:
            await worker.wait_async(timeout=30)  # drain what is queued, within reason
            await worker.stop_async()
            await serving
            queues.close()

    app = FastAPI(lifespan=lifespan)

    @app.post("/emails")
    async def queue_email(body: dict[str, str]) -> dict[str, Any]:
        to = body["to"]
        stored = await emails.add_async({"to": to}, job_id=f"welcome:{to}")
        return {"queued": stored}

    @app.get("/emails/pending")
    async def pending() -> dict[str, int]:
        return {"pending": await emails.len_async()}

    return app


def __getattr__(name: str) -> Any:  # `uvicorn examples.fastapi_app:app` makes it on import
    if name == "app":
        return create_app()
    raise AttributeError(name)


async def self_check(database: str) -> None:
    app = create_app(database)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            for to in ("a@example.com", "b@example.com", "c@example.com"):
                answer = await client.post("/emails", json={"to": to})
                assert answer.status_code == 200 and answer.json() == {"queued": True}
            print("pending right after the posts:", (await client.get("/emails/pending")).json())
    # The lifespan drained the queue on shutdown: every posted email was sent.
    assert sorted(SENT) == ["a@example.com", "b@example.com", "c@example.com"], SENT
    print("sent:", sorted(SENT))


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        asyncio.run(self_check(str(Path(scratch) / "emails.db")))
