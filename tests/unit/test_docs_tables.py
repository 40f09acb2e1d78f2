"""The reference tables of docs/workers.md name every worker option and every ``add`` keyword.

A new option that is not in the table fails here, so the table stays the whole list.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import get_type_hints

import varmq
from varmq.api.storage_queues import DistributedPriorityQueue, DistributedQueue
from varmq.api.worker import BaseWorker

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _table_rows(text: str, heading: str) -> list[str]:
    """The rows of the first table after ``heading``."""
    rest = text.split(heading, 1)[1]
    rows, seen = [], False
    for line in rest.splitlines():
        if line.startswith("|"):
            rows.append(line)
            seen = True
        elif seen:
            break
    return rows


def test_every_worker_option_has_a_row_in_the_options_table() -> None:
    text = (DOCS / "workers.md").read_text()
    documented = {
        match.group(1)
        for row in _table_rows(text, "| Option | Default | What it does |")
        if (match := re.match(r"\| `(\w+)` \|", row))
    }
    options = set(get_type_hints(varmq.WorkerOptions))
    parameters = set(inspect.signature(BaseWorker.__init__).parameters) - {
        "self",
        "fn",
        "concurrency",
    }
    assert options == parameters  # the TypedDict and the constructor agree
    assert sorted(options - documented) == []


def test_every_add_keyword_is_in_the_handles_table() -> None:
    text = (DOCS / "workers.md").read_text()
    [row] = [r for r in _table_rows(text, "| Call | Does |") if r.startswith("| `q.add(data")]
    handles = [
        varmq.new_worker(lambda job: None, auto_run=False).bind_queue(),
        varmq.new_worker(lambda job: None, auto_run=False).bind_priority_queue(),
    ]
    methods = [type(h).add for h in handles] + [DistributedQueue.add, DistributedPriorityQueue.add]
    keywords = {
        name
        for method in methods
        for name, p in inspect.signature(method).parameters.items()
        if name not in ("self", "data")
    }
    missing = sorted(k for k in keywords if f"{k}=" not in row.split("|")[1])
    assert missing == []
