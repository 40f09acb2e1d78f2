"""``varmq worker MODULE:ATTR``, run as a subprocess on a module of the test's own.

The module (written to a temporary directory, which is the command's working directory, as a
project's own modules are) holds in-memory workers; its ``on_startup`` hook and job functions
print to stdout, which is how the test knows the service is up or a job is running before it
sends SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import varmq

_MODULE = """
import logging
import os
import threading

import varmq


def ready():
    print("ready", flush=True)


def run(job):
    if job.data == "hang":
        print("running", flush=True)
        threading.Event().wait()  # never ends: left to the process's exit


worker = varmq.new_worker(run, 2, name="svc", auto_run=False, on_startup=ready)
worker.bind_queue().add("quick")


def hanging():
    stuck = varmq.new_worker(run, 1, name="stuck", auto_run=False)
    stuck.bind_queue().add("hang")
    return stuck


def broken():
    raise RuntimeError("no config\\nsecond line")


def slow(job):
    print("running", flush=True)
    threading.Event().wait(job.data)


def timing_out():
    timed = varmq.new_worker(slow, 1, name="timed", auto_run=False, timeout=0.05)
    timed.bind_queue().add(0.5)
    return timed


def overrunning():
    # A plain function that ignores its 0.05 s timeout: its job is settled at the timeout,
    # the function runs on for job.data seconds.
    over = varmq.new_worker(slow, 1, name="over", auto_run=False, timeout=0.05)
    over.bind_queue().add(float(os.environ.get("OVERRUN", "60")))
    return over


def charge(job):
    logging.getLogger("svc.jobs").info("charging %s", job.data["args"][0])
    if job.data["args"][0] == 13:
        raise ValueError("card declined")
    if job.data["args"][0] == 99:
        print("ran", flush=True)


def charging():
    payer = varmq.new_worker(charge, 1, name="payer", auto_run=False, log_failures=True)
    payments = payer.bind_queue()
    payments.add({"task": "charge", "args": [13], "kwargs": {}}, job_id="pay-13")
    payments.add({"task": "charge", "args": [99], "kwargs": {}}, job_id="pay-99")
    return payer


not_a_worker = 42
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "svc_jobs.py").write_text(_MODULE)
    (tmp_path / "explodes.py").write_text("raise RuntimeError('at import')\n")
    return tmp_path


def _start(project: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "varmq", "worker", *args],
        cwd=project,
        env=None if env is None else {**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_line(process: subprocess.Popen[str], expected: str) -> None:
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    assert line == expected, (line, process.stderr.read() if process.stderr else "")


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("svc_jobs", "expected MODULE:ATTR"),
        (":worker", "expected MODULE:ATTR"),
        ("svc_jobs:", "expected MODULE:ATTR"),
        ("no_such_module_here:worker", "cannot import 'no_such_module_here'"),
        ("explodes:worker", "cannot import 'explodes': RuntimeError: at import"),
        ("svc_jobs:nothing", "has no attribute 'nothing'"),
        ("svc_jobs:not_a_worker", "is not a worker"),
        ("svc_jobs:broken", "calling svc_jobs:broken raised RuntimeError: no config second"),
    ],
)
def test_a_bad_module_attr_exits_2_with_one_line(project: Path, target: str, message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "varmq", "worker", target],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert message in lines[0]


def test_a_negative_grace_exits_2(project: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "varmq", "worker", "svc_jobs:worker", "--grace", "-1"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--grace must be >= 0" in done.stderr


def _sigterm_once(
    project: Path, target: str, grace: str, when: str, env: dict[str, str] | None = None
) -> tuple[int, str]:
    """Run ``varmq worker target``, send SIGTERM once stdout says ``when``; (status, stderr)."""
    process = _start(project, target, "--grace", grace, env=env)
    try:
        _wait_for_line(process, when)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
    return process.returncode, err


def test_sigterm_stops_the_service_cleanly_with_exit_0_and_a_summary_line(project: Path) -> None:
    status, err = _sigterm_once(project, "svc_jobs:worker", "5", when="ready")
    assert status == 0, err
    assert "varmq: stopped 1 worker" in err and "after SIGTERM" in err
    assert "0 still running" in err
    assert "Traceback" not in err


def test_the_service_says_at_start_up_what_it_runs(project: Path) -> None:
    status, err = _sigterm_once(project, "svc_jobs:worker", "5", when="ready")
    assert status == 0, err
    [line] = [line for line in err.splitlines() if "varmq: starting" in line]
    assert "starting 1 worker, grace 5 s, no metrics: svc (concurrency 2;" in line, line


def test_a_timed_out_job_is_one_warning_line_without_a_stray_traceback(project: Path) -> None:
    status, err = _sigterm_once(project, "svc_jobs:timing_out", "5", when="running")
    assert status == 0, err
    [warning] = [line for line in err.splitlines() if "JobTimeoutError" in line]
    assert "WARNING" in warning and "failed on attempt 1" in warning, err


def test_a_metrics_port_in_use_exits_2_with_one_line(project: Path) -> None:
    pytest.importorskip("prometheus_client")
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "varmq",
                "worker",
                "svc_jobs:worker",
                "--metrics-port",
                str(port),
            ],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert f"--metrics-port {port}: cannot serve metrics there" in line, line


def test_a_job_still_running_past_the_grace_makes_the_exit_status_1(project: Path) -> None:
    status, err = _sigterm_once(project, "svc_jobs:hanging", "0.3", when="running")
    assert status == 1, err
    assert "1 still running" in err
    assert "left to their leases" in err


def test_a_function_running_past_its_timeout_is_counted_running_and_exits_1(
    project: Path,
) -> None:
    status, err = _sigterm_once(project, "svc_jobs:overrunning", "1", when="running")
    assert status == 1, err
    [line] = [line for line in err.splitlines() if "varmq: stopped" in line]
    assert "1 still running (1 past its timeout)" in line, line


def test_a_function_past_its_timeout_gets_the_grace_to_return(project: Path) -> None:
    status, err = _sigterm_once(
        project, "svc_jobs:overrunning", "30", when="running", env={"OVERRUN": "1.5"}
    )
    assert status == 0, err
    [line] = [line for line in err.splitlines() if "varmq: stopped" in line]
    took = float(line.split(" in ")[1].split(" s ")[0])
    assert took >= 1.0, line  # it waited for the function, not only for the settled job
    assert "0 still running" in line, line


def test_an_app_target_gives_its_worker_on_the_queues_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from varmq.ops.cli import CliError, _load_workers

    (tmp_path / "app_tasks.py").write_text(
        "import varmq\n"
        "app = varmq.App()\n"
        "@app.task(queue='mail')\n"
        "def send(to: str) -> None: ...\n"
        "@app.task(queue='billing')\n"
        "def charge(amount: int) -> None: ...\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    (worker,) = _load_workers("app_tasks:app", ["billing"], 3)
    assert worker.status is varmq.Status.INITIATED  # varmq.run starts it, signals handled
    assert worker.num_concurrency == 3
    assert [row["name"] for row in worker.queue_stats()] == ["billing"]
    with pytest.raises(CliError, match="for an App target"):
        _load_workers("app_tasks:app.tasks", ["mail"], None)


def test_sigterm_while_the_module_imports_ends_the_command_cleanly(project: Path) -> None:
    (project / "slow_import.py").write_text(
        "import threading, varmq\n"
        "print('importing', flush=True)\n"
        "threading.Event().wait(30)  # a start-up that takes its time (a store, a model)\n"
        "worker = varmq.new_worker(lambda job: None, auto_run=False)\n"
        "worker.bind_queue()\n"
    )
    process = _start(project, "slow_import:worker")
    try:
        _wait_for_line(process, "importing")
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0  # heard, not fatal: before the fix, killed (-15)
        assert process.stderr is not None
        assert "SIGTERM during start-up: not starting" in process.stderr.read()
    finally:
        process.kill()
        process.wait()


def test_json_log_lines_name_the_queue_job_attempt_and_task_of_each_job(project: Path) -> None:
    process = _start(project, "svc_jobs:charging", "--grace", "5", "--log-format", "json")
    try:
        _wait_for_line(process, "ran")
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0, err
    lines = [json.loads(line) for line in err.splitlines()]  # every line is one JSON object
    about = {
        (line["job_id"], line["message"].split(":")[0]): line for line in lines if "job_id" in line
    }
    charging = about[("pay-13", "charging 13")]
    failed = next(
        line for (job, _), line in about.items() if job == "pay-13" and line is not charging
    )
    for line in (charging, failed, about[("pay-99", "charging 99")]):
        assert line["attempt"] == 1
        assert line["task"] == "charge"
        assert line["queue"]
    assert charging["logger"] == "svc.jobs" and charging["level"] == "INFO"
    assert failed["level"] == "WARNING" and "ValueError: card declined" in failed["exception"]
    assert any("varmq: starting" in line["message"] for line in lines)
