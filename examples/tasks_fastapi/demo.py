"""The tasks example end to end, on a fresh machine: a worker process and the FastAPI producer.

Starts ``python -m varmq worker tasks:app`` as a process (from this directory, so that
``tasks`` imports), drives the API of ``api.py`` in this process through ``httpx``'s ASGI
transport (no server, no port), checks each answer, then stops the worker with SIGTERM and
exits 0. The jobs are in a SQLite file in a temporary directory, removed at the end. Run it
from anywhere::

    python examples/tasks_fastapi/demo.py
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from decimal import Decimal
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PATHS = [str(HERE), str(ROOT), str(ROOT / "adapters")]
sys.path[:0] = PATHS  # run from a plain checkout; `tasks` and `api` from this directory

import httpx  # noqa: E402  (after the path set-up above)

WAIT = 20.0
"""Seconds a GET long-polls for a call to end."""


def start_worker(database: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TASKS_DB": database}
    env["PYTHONPATH"] = os.pathsep.join([*PATHS, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    command = [sys.executable, "-m", "varmq", "worker", "tasks:app", "--concurrency", "4"]
    print("$", " ".join(command[1:]), flush=True)
    return subprocess.Popen([*command, "--grace", "10"], cwd=HERE, env=env)


async def drive(worker: subprocess.Popen[bytes]) -> None:
    from api import api  # imports tasks, which opens $TASKS_DB
    from tasks import Invoice, make_invoice

    transport = httpx.ASGITransport(app=api)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:

        async def run_of(job_id: str) -> dict[str, Any]:
            answer = await client.get(f"/runs/{job_id}", params={"wait": WAIT})
            assert answer.status_code == 200, answer.text
            record: dict[str, Any] = answer.json()
            assert record["state"] != "queued" or worker.poll() is None, "the worker exited"
            return record

        # An invoice: POST answers the id at once; GET ?wait= answers when it ran.
        answer = await client.post(
            "/invoices",
            json={
                "customer": "ACME",
                "issued": "2024-05-01T09:30:00+00:00",
                "lines": [
                    {"item": "bolts", "quantity": 3, "unit_price": "0.25"},
                    {"item": "nuts", "quantity": 10, "unit_price": "0.10"},
                ],
            },
        )
        assert answer.status_code == 200, answer.text
        invoice_id = answer.json()["id"]
        print("POST /invoices ->", answer.json())
        now = (await client.get(f"/runs/{invoice_id}")).json()
        assert now["state"] in ("queued", "running", "succeeded"), now
        print("GET /runs/<id> right away -> state", now["state"])
        record = await run_of(invoice_id)
        print("GET /runs/<id>?wait=20 ->", record["state"], record["result"])
        assert record["state"] == "succeeded" and record["attempts"] == 1, record
        assert record["result"] == {
            "customer": "ACME",
            "total": "1.75",
            "issued": "2024-05-01T09:30:00+00:00",
            "due": "2024-05-31",
        }, record
        # The same result in Python, rebuilt from make_invoice's return annotation.
        invoice = await make_invoice.run_of(invoice_id).result_async(timeout=5)
        assert isinstance(invoice, Invoice) and invoice.total == Decimal("1.75"), invoice
        print("make_invoice.run_of(<id>).result() ->", invoice)

        # A reminder, by the async task.
        answer = await client.post(
            "/reminders",
            json={
                "invoice": "12345678-1234-5678-1234-567812345678",
                "channel": "sms",
                "at": "2024-05-20T08:00:00+00:00",
            },
        )
        assert answer.status_code == 200, answer.text
        record = await run_of(answer.json()["id"])
        print("reminder ->", record["state"], repr(record["result"]))
        assert record["state"] == "succeeded", record
        assert record["result"] == (
            "reminder for 12345678-1234-5678-1234-567812345678 sent by sms at 2024-05-20 08:00"
        ), record

        # Ten invoices at once, each followed by its own long poll.
        posted = await asyncio.gather(
            *(
                client.post(
                    "/invoices",
                    json={
                        "customer": f"customer-{i}",
                        "issued": "2024-06-01T00:00:00+00:00",
                        "lines": [{"item": "widget", "quantity": i + 1, "unit_price": "2.50"}],
                    },
                )
                for i in range(10)
            )
        )
        ids = [answer.json()["id"] for answer in posted]
        assert len(set(ids)) == 10, ids
        records = await asyncio.gather(*(run_of(job_id) for job_id in ids))
        totals = [r["result"]["total"] for r in records if r["state"] == "succeeded"]
        assert totals == [str(Decimal("2.50") * (i + 1)) for i in range(10)], records
        print("10 invoices at once ->", totals)

        # What the API refuses: a channel that is not one, an id no call has.
        answer = await client.post(
            "/reminders",
            json={"invoice": "12345678-1234-5678-1234-567812345678", "channel": "fax", "at": "x"},
        )
        assert answer.status_code == 422, answer.text
        answer = await client.get("/runs/no-such-call")
        assert answer.status_code == 404, answer.text
        print("a bad body -> 422, an unknown id -> 404")


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch:
        database = str(Path(scratch) / "tasks.db")
        os.environ["TASKS_DB"] = database  # for the api and tasks modules imported here
        worker = start_worker(database)
        try:
            asyncio.run(drive(worker))
        finally:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
            try:
                code = worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
                code = worker.wait()
            from tasks import store

            store.close()
        print("worker stopped by SIGTERM, exit status", code)
        return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
