"""A consumer to run as a service: ``varmq worker examples.worker_service:worker``.

The module-level ``worker`` sends the emails queued in the SQLite queue ``emails`` of the file
``$JOBS_DB`` (default ``jobs.db``), four at a time, each with a 60 s timeout. Run it from the
repository root as a process manager would::

    varmq worker examples.worker_service:worker --grace 30

and stop it with SIGTERM (or Ctrl-C): it stops taking jobs, hands jobs it took but did not
start back to the file, gives running jobs 30 s, logs one summary line and exits 0 (1 when a
job was still running; its lease brings it back on another consumer). ``docs/deploy.md`` shows
the same command under systemd, Docker and Kubernetes.

Run as a script, it shows that life from the outside: it adds five jobs to a temporary file,
starts the command above on it in a child process, waits until the child has sent them, sends
SIGTERM and prints the child's summary line and exit status::

    python examples/worker_service.py
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import sqliteq
import varmq

ROOT = Path(__file__).resolve().parent.parent
JOBS = 5
# Guards stdout: jobs run on four threads, and each line must come out whole.
_print_lock = threading.Lock()


def send_email(job: varmq.Job[dict[str, str]]) -> None:
    """The job: here it only says what it would send."""
    with _print_lock:
        print(f"sent to {job.data['to']}", flush=True)


def make_worker(path: str) -> varmq.Worker[dict[str, str]]:
    """The service's worker on the queue ``emails`` of the SQLite file ``path``.

    ``auto_run=False``: ``varmq worker`` starts it once its signal handlers are in place. The
    file is closed by ``on_shutdown``, after the worker stopped.
    """
    queues = sqliteq.new(path)
    worker: varmq.Worker[dict[str, str]] = varmq.new_worker(
        send_email, 4, name="mailer", auto_run=False, timeout=60.0, on_shutdown=queues.close
    )
    worker.with_distributed_queue(queues.new_distributed_queue("emails"))
    return worker


if __name__ != "__main__":  # imported, by `varmq worker`: the service's worker
    worker = make_worker(os.environ.get("JOBS_DB", "jobs.db"))


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "jobs.db")
        queues = sqliteq.new(path)
        emails = varmq.new_distributed_queue(queues.new_distributed_queue("emails"))
        for n in range(JOBS):
            emails.add({"to": f"user{n}@example.com"})
        paths = [str(ROOT), str(ROOT / "adapters"), os.environ.get("PYTHONPATH", "")]
        env = {**os.environ, "JOBS_DB": path, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
        command = [sys.executable, "-m", "varmq", "worker", "examples.worker_service:worker"]
        child = subprocess.Popen(
            [*command, "--grace", "10"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        try:
            for _ in range(JOBS):  # one line per job sent: the child is busy until then
                print("service:", child.stdout.readline().strip())
            child.send_signal(signal.SIGTERM)
            _, err = child.communicate(timeout=30)
        finally:
            child.kill()
            queues.close()
        for line in err.splitlines():
            if "varmq: stopped" in line:
                print("service log:", line.split(": ", 1)[1])
        print("exit status:", child.returncode)
        return child.returncode


if __name__ == "__main__":
    sys.exit(main())
