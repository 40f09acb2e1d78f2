"""Django's Tasks framework on varmq, across real processes: the example project
(examples/django/) enqueues from one ``manage.py shell`` process, ``manage.py varmq_worker`` runs
the tasks, and another process reads the results by id. Every kind of task the backend claims:
plain, ``async def``, failing, ``takes_context``, deferred, prioritised; and an enqueue inside a
rolled-back ``atomic()`` stores nothing. Runs on Django 6's ``django.tasks`` or the
``django-tasks`` backport, whichever this Python has (run.py runs it on both)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("django")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "django"

_ENQUEUE = """
import json
from datetime import timedelta
from django.db import transaction
from django.utils import timezone
from shop.tasks import add, charge, greet, note, whoami

ids = {
    "add": add.enqueue(2, 3).id,
    "greet": greet.enqueue("ada").id,
    "charge": charge.enqueue(1250).id,
    "whoami": whoami.enqueue().id,
    "later": add.using(run_after=timezone.now() + timedelta(seconds=3)).enqueue(40, 2).id,
    "low": note.using(priority=-10).enqueue("low").id,
    "mid": note.enqueue("mid").id,
    "high": note.using(priority=50).enqueue("high").id,
}
try:
    with transaction.atomic():
        ids["rolled_back"] = add.enqueue(1, 1).id
        raise RuntimeError("the view failed")
except RuntimeError:
    pass
print("RESULT " + json.dumps(ids))
"""

_READ = """
import json, time
from shop.tasks import add
try:
    from django.tasks import default_task_backend as backend
    from django.tasks.exceptions import TaskResultDoesNotExist
except ImportError:
    from django_tasks import default_task_backend as backend
    from django_tasks.exceptions import TaskResultDoesNotExist

ids = json.loads(IDS)
seen = {}
deadline = time.monotonic() + 45
for name, rid in ids.items():
    if name == "rolled_back":
        try:
            backend.get_result(rid)
            seen[name] = "found"
        except TaskResultDoesNotExist:
            seen[name] = "missing"
        continue
    result = backend.get_result(rid)
    while not result.is_finished and time.monotonic() < deadline:
        time.sleep(0.05)
        result.refresh()
    seen[name] = {
        "status": str(result.status),
        "value": result.return_value if result.status == "SUCCESSFUL" else None,
        "errors": [[e.exception_class_path, e.traceback] for e in result.errors],
        "attempts": result.attempts,
        "task": result.task.name,
        "enqueued": result.enqueued_at is not None,
        "started": result.started_at is not None,
        "finished": result.finished_at is not None,
        "ran_after": (result.started_at - result.enqueued_at).total_seconds(),
    }
import asyncio
seen["read_async"] = str(asyncio.run(backend.aget_result(ids["add"])).status)
print("RESULT " + json.dumps(seen))
"""


def _manage_shell(project: Path, env: dict[str, str], code: str) -> Any:
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(line.removeprefix("RESULT "))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    copy = tmp_path / "project"
    shutil.copytree(
        EXAMPLE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.sqlite3", "*.db")
    )
    return copy


def test_a_django_project_enqueues_runs_and_reads_results_across_processes(
    project: Path, tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    notes = tmp_path / "notes.txt"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "mysite.settings",
        "DJANGO_DB": str(tmp_path / "db.sqlite3"),
        "VARMQ_URL": f"sqlite:{tmp_path / 'jobs.db'}",
        "NOTES": str(notes),
    }
    ids = _manage_shell(project, env, _ENQUEUE)
    assert set(ids) >= {"add", "rolled_back"}
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "varmq_worker", "--concurrency", "1", "--grace", "5"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    processes.append(worker)
    seen = _manage_shell(project, env, f"IDS = {json.dumps(json.dumps(ids))}\n{_READ}")
    worker.send_signal(signal.SIGTERM)
    _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert "stopped 1 worker" in err

    assert seen["add"]["status"] == "SUCCESSFUL" and seen["add"]["value"] == 5
    assert seen["add"]["attempts"] == 1 and seen["add"]["task"] == "add"
    assert seen["add"]["enqueued"] and seen["add"]["started"] and seen["add"]["finished"]
    assert seen["greet"]["value"] == "hello ada"  # async def, on the "emails" queue
    charged = seen["charge"]
    assert charged["status"] == "FAILED" and charged["value"] is None
    [[class_path, trace]] = charged["errors"]
    assert class_path == "builtins.ValueError"
    assert "card declined for 1250 cents" in trace
    who = seen["whoami"]
    assert who["value"] == {"attempt": 1, "id": ids["whoami"]}
    later = seen["later"]
    assert later["value"] == 42 and later["ran_after"] >= 3.0 - 0.01
    assert seen["rolled_back"] == "missing"
    assert seen["read_async"] == "SUCCESSFUL"  # aget_result, from a coroutine
    # One consumer thread, the three notes added while no worker ran: highest priority first.
    assert notes.read_text().split() == ["high", "mid", "low"]
