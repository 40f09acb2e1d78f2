"""A FastAPI producer for the tasks of ``tasks.py``: POST enqueues a call and answers its id,
GET follows the call by id, from this process or any other.

Serve it from this directory, with a worker running beside it::

    cd examples/tasks_fastapi
    python -m varmq worker tasks:app &
    uvicorn api:api

    curl -X POST localhost:8000/invoices -H 'content-type: application/json' \\
      -d '{"customer": "ACME", "issued": "2024-05-01T09:30:00+00:00",
           "lines": [{"item": "bolts", "quantity": 3, "unit_price": "0.25"}]}'
    # {"id": "3f6c0a..."}
    curl 'localhost:8000/runs/3f6c0a...?wait=10'
    # {"id": "3f6c0a...", "state": "succeeded", "attempts": 1, "result": {...}, ...}

``?wait=S`` long-polls: the answer comes when the call ended, or after S seconds with the
record as it is then. ``python demo.py`` runs the worker and this API and checks the answers.
"""

from __future__ import annotations

import contextlib
import dataclasses
from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import FastAPI, HTTPException, Query
from tasks import Channel, Line, app, make_invoice, send_reminder

import varmq

api = FastAPI(title="varmq tasks example")


@dataclasses.dataclass
class InvoiceRequest:
    customer: str
    lines: list[Line]
    issued: datetime


@dataclasses.dataclass
class ReminderRequest:
    invoice: UUID
    channel: Channel
    at: datetime


@api.post("/invoices")
async def post_invoice(body: InvoiceRequest) -> dict[str, str]:
    """Enqueue ``make_invoice``; the id to follow it by."""
    run = await make_invoice.enqueue_async(body.customer, body.lines, body.issued)
    return {"id": run.id}


@api.post("/reminders")
async def post_reminder(body: ReminderRequest) -> dict[str, str]:
    """Enqueue ``send_reminder``; the id to follow it by."""
    run = await send_reminder.enqueue_async(body.invoice, body.channel, body.at)
    return {"id": run.id}


@api.get("/runs/{job_id}")
async def get_run(job_id: str, wait: Annotated[float, Query(ge=0, le=60)] = 0.0) -> dict[str, Any]:
    """The record of the call ``job_id``: ``state``, ``attempts``, ``result`` (as stored:
    JSON), ``error``, ``progress`` when the task reported one; with ``wait``, once it ended
    or after ``wait`` seconds. 404 for an id no queue of the app has a record of."""
    run = app.run_of(job_id)  # both tasks are on the app's default queue
    try:
        if wait:
            # Not ended yet, or ended badly: the record says which.
            with contextlib.suppress(TimeoutError, varmq.JobFailedError):
                await run.result_async(timeout=wait)
        record = await run.status_async()
    except varmq.JobNotFoundError:
        raise HTTPException(status_code=404, detail=f"no call {job_id!r}") from None
    return {
        "id": record.id,
        "state": record.state,
        "attempts": record.attempts,
        "result": record.result,
        "error": None if record.error is None else dataclasses.asdict(record.error),
        "progress": None if record.progress is None else dataclasses.asdict(record.progress),
        "enqueued_at": record.enqueued_at,
        "finished_at": record.finished_at,
    }
