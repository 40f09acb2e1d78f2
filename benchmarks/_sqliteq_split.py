"""Where the time of one sqliteq single add goes, against one raw autocommit ``INSERT``.

Measured in this process on a fresh file: the statements of an add timed one by one on a plain
``sqlite3`` connection to a sqliteq file (``BEGIN IMMEDIATE``, the ``INSERT``, the queue's
enqueue counter ``UPDATE``, ``COMMIT``), then the adapter's ``enqueue`` (those statements plus
the adapter's Python), then a varmq handle's ``add`` (plus the envelope and the handle), and the
baseline: an autocommit ``INSERT`` into a one-column table. Microseconds per add, median of
``repeat`` runs. The SQL alone bounds the single-add ratio: raw / SQL.
"""

from __future__ import annotations

import sqlite3
import statistics
import time
from collections.abc import Callable
from pathlib import Path

_RAW_INSERT = "INSERT INTO jobs (data) VALUES (?)"


CHUNK = 250
"""Calls of one part in a row before the next part's turn."""


def _timed(n: int, call: Callable[[], object]) -> float:
    """Seconds ``n`` calls of ``call`` took."""
    start = time.perf_counter()
    for _ in range(n):
        call()
    return time.perf_counter() - start


def split(directory: Path, n: int, repeat: int = 3) -> list[str]:
    """Note lines: microseconds per add for each part, and the ratio the SQL alone allows."""
    import sqliteq
    import varmq
    from sqliteq import _sql

    path = directory / "split.db"
    queues = sqliteq.new(path)
    stored = queues.new_distributed_queue("split")
    handle = varmq.new_distributed_queue(stored)
    payload = varmq.contract.envelope.encode("", 0)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous = NORMAL")
    raw = sqlite3.connect(directory / "split-raw.db", isolation_level=None)
    raw.execute("PRAGMA journal_mode = WAL")
    raw.execute("PRAGMA synchronous = NORMAL")
    raw.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, data BLOB NOT NULL)")
    params = {"queue": "split", "priority": 0, "data": payload, "now": 0}
    steps = {
        "BEGIN": _sql.BEGIN_IMMEDIATE,
        "INSERT": _sql.ENQUEUE,
        "counter UPDATE": _sql.BUMP_ENQUEUED,
        "COMMIT": _sql.COMMIT,
    }
    parts: dict[str, list[float]] = {name: [] for name in (*steps, "enqueue", "add", "raw")}

    def statements() -> None:
        for name, statement in steps.items():
            start = time.perf_counter()
            conn.execute(statement, params)
            spent[name] += time.perf_counter() - start

    calls = {
        "enqueue": lambda: stored.enqueue(payload),
        "add": lambda: handle.add(None),
        "raw": lambda: raw.execute(_RAW_INSERT, (payload,)),
    }
    try:
        for _ in range(repeat):
            # Every part runs in turns of CHUNK calls, so a burst of load hits them alike.
            spent = dict.fromkeys((*steps, *calls), 0.0)
            for _ in range(max(1, n // CHUNK)):
                for _ in range(CHUNK):
                    statements()
                for name, call in calls.items():
                    spent[name] += _timed(CHUNK, call)
            for name, total in spent.items():
                parts[name].append(total / (max(1, n // CHUNK) * CHUNK) * 1e6)
    finally:
        conn.close()
        raw.close()
        queues.close()
    us = {name: statistics.median(values) for name, values in parts.items()}
    sql = sum(us[name] for name in steps)
    statements = ", ".join(f"{name} {us[name]:.1f}" for name in steps)
    return [
        f"sqliteq single add, where the time goes (us per add, median of {repeat} x {n:,}): "
        f"{statements} = SQL {sql:.1f}; adapter enqueue {us['enqueue']:.1f} (Python "
        f"{us['enqueue'] - sql:.1f}); varmq handle add {us['add']:.1f} (envelope and handle "
        f"{us['add'] - us['enqueue']:.1f}); raw autocommit INSERT {us['raw']:.1f}. "
        f"The SQL alone allows at most {us['raw'] / sql:.2f}x raw, the adapter "
        f"{us['raw'] / us['enqueue']:.2f}x, the handle {us['raw'] / us['add']:.2f}x.",
    ]
