"""Django tasks on varmq, end to end: enqueue from Django, run with ``manage.py varmq_worker``,
read the results by id from another process.

    pip install 'varmq[django]'
    python examples/django/demo.py

Everything lives in a temporary directory; the worker is stopped with SIGTERM at the end.
"""

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def manage(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=HERE, env=env, capture_output=True, text=True
    )
    if done.returncode:
        raise SystemExit(done.stderr)
    return done.stdout


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        env = {
            **os.environ,
            "DJANGO_DB": str(Path(scratch, "db.sqlite3")),
            "VARMQ_URL": f"sqlite:{Path(scratch, 'jobs.db')}",
            "NOTES": str(Path(scratch, "notes.txt")),
        }
        enqueue = (
            "from shop.tasks import add, greet\n"
            "print('ids', add.enqueue(2, 3).id, greet.enqueue('ada').id)\n"
        )
        [ids] = [
            line.split()[1:]
            for line in manage("shell", "-c", enqueue, env=env).splitlines()
            if line.startswith("ids ")
        ]
        worker = subprocess.Popen(
            [sys.executable, "manage.py", "varmq_worker", "--concurrency", "2"], cwd=HERE, env=env
        )
        try:
            read = (
                "import time\n"
                "from shop.tasks import add, greet\n"
                f"for task, rid in ((add, {ids[0]!r}), (greet, {ids[1]!r})):\n"
                "    deadline = time.monotonic() + 30\n"
                "    result = task.get_result(rid)\n"
                "    while not result.is_finished and time.monotonic() < deadline:\n"
                "        time.sleep(0.1); result.refresh()\n"
                "    print('result', task.name, result.status, result.return_value)\n"
            )
            for line in manage("shell", "-c", read, env=env).splitlines():
                if line.startswith("result "):
                    print(line.removeprefix("result "))
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)


if __name__ == "__main__":
    main()
