"""The tasks of the example: an App over a SQLite file, and two tasks with typed arguments.

The file is ``$TASKS_DB``, else ``varmq-tasks-example.db`` in the temporary directory. Run the
worker from this directory (``tasks`` must import)::

    cd examples/tasks_fastapi
    python -m varmq worker tasks:app --concurrency 4

and the producer next to it (``api.py``), or ``python demo.py``, which runs both and checks them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import os
import sys
import tempfile
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from uuid import UUID

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "adapters")]  # run from a plain checkout

import sqliteq  # noqa: E402  (after the path set-up above)
import varmq  # noqa: E402

DATABASE = os.environ.get("TASKS_DB") or os.path.join(
    tempfile.gettempdir(), "varmq-tasks-example.db"
)

store = sqliteq.new(DATABASE)
app = varmq.App(store)


@dataclasses.dataclass(frozen=True)
class Line:
    item: str
    quantity: int
    unit_price: Decimal


@dataclasses.dataclass(frozen=True)
class Invoice:
    customer: str
    total: Decimal
    issued: datetime
    due: date


class Channel(enum.Enum):
    EMAIL = "email"
    SMS = "sms"


@app.task
def make_invoice(customer: str, lines: list[Line], issued: datetime) -> Invoice:
    """An invoice for ``lines``, due 30 days after ``issued``: the arguments arrive rebuilt
    (``Line`` dataclasses holding ``Decimal`` prices, a ``datetime``), and so does the
    ``Invoice`` that ``run.result()`` gives."""
    total = sum((line.unit_price * line.quantity for line in lines), Decimal("0"))
    return Invoice(customer, total, issued, (issued + timedelta(days=30)).date())


@app.task(retry=varmq.Retry(max_attempts=3, backoff=0.5))
async def send_reminder(invoice: UUID, channel: Channel, at: datetime) -> str:
    """Pretend to send a reminder about ``invoice`` (an ``async def`` task)."""
    await asyncio.sleep(0.05)  # the network call
    return f"reminder for {invoice} sent by {channel.value} at {at:%Y-%m-%d %H:%M}"
