"""The ``varmq`` command against what an operator should not have to trust: job data that
carries terminal escape sequences, a password that must stay out of ``ps``, a metrics port that
must not face the network, and a store that is busy when the service starts.

Stores are real (a SQLite file in a temporary directory); the commands run in this process
through :func:`varmq.ops.cli.main`, except where a real process is the point (start-up).
"""

from __future__ import annotations

import io
import json
import socket
import sqlite3
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

import sqliteq
from varmq.ops import cli

ESC, BEL = "\x1b", "\x07"
EVIL_QUEUE = f"jobs{ESC}]0;owned{BEL}"
EVIL_ID = f"id-{ESC}[2J"
EVIL_ERROR = f"boom {ESC}[31mred{BEL} and a title {ESC}]0;x{BEL}"


def _varmq(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``varmq ARGS`` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stdout", out)
        patch.setattr("sys.stderr", err)
        if env is not None:
            for key, value in env.items():
                patch.setenv(key, value)
        code = cli.main(list(args))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def hostile(tmp_path: Path) -> str:
    """A sqliteq file whose queue name, job id, dead letter and record carry escapes."""
    path = tmp_path / "jobs.db"
    with sqliteq.new(path) as store:
        q = store.new_queue(EVIL_QUEUE, keep_results=3600)
        data = json.dumps({"id": EVIL_ID, "status": "Created", "data": f"x{ESC}[H"})
        assert q.enqueue_dedup(data, EVIL_ID)
        taken = q.dequeue_with_ack_id()
        assert taken is not None
        assert q.dead_letter_with_error(taken[1], EVIL_ERROR, EVIL_ERROR)
    return str(path)


def _assert_escaped(text: str) -> None:
    assert ESC not in text and BEL not in text, repr(text)
    assert "\\x1b" in text, text


@pytest.mark.parametrize(
    "command",
    [
        ["stats"],
        ["watch", "--count", "1"],
        ["dead", "QUEUE"],
        ["job", "QUEUE", EVIL_ID],
    ],
    ids=["stats", "watch", "dead", "job"],
)
def test_control_characters_from_storage_are_printed_escaped(
    hostile: str, command: list[str]
) -> None:
    args = [command[0], hostile, *(EVIL_QUEUE if a == "QUEUE" else a for a in command[1:])]
    code, out, err = _varmq(*args)
    assert code == 0, err
    _assert_escaped(out)


def test_json_output_stays_exact_json_with_the_stored_text(hostile: str) -> None:
    code, out, _ = _varmq("dead", hostile, EVIL_QUEUE, "--json")
    assert code == 0 and ESC not in out
    [row] = json.loads(out)
    assert (row["id"], row["error"]) == (EVIL_ID, EVIL_ERROR)
    code, out, _ = _varmq("stats", hostile, "--json")
    assert code == 0 and [r["name"] for r in json.loads(out)] == [EVIL_QUEUE]


def test_an_unknown_queue_lists_the_stored_names_escaped(hostile: str) -> None:
    code, _, err = _varmq("dead", hostile, "other")
    assert code == 2
    _assert_escaped(err)


# -- the store URL from a file or the environment ---------------------------------------------


@pytest.fixture
def store_file(tmp_path: Path) -> str:
    path = tmp_path / "store.db"
    with sqliteq.new(path) as store:
        assert store.new_queue("emails").enqueue(b"{}")
    return str(path)


def _names(out: str) -> list[str]:
    return [row["name"] for row in json.loads(out)]


def test_the_url_may_come_from_a_file(store_file: str, tmp_path: Path) -> None:
    url_file = tmp_path / "url"
    url_file.write_text(f"sqlite:///{store_file}\n")
    code, out, err = _varmq("stats", "--url-file", str(url_file), "--json")
    assert code == 0, err
    assert _names(out) == ["emails"]
    code, out, err = _varmq("dead", f"--url-file={url_file}", "emails", "--json")
    assert (code, json.loads(out)) == (0, []), err


def test_the_url_may_come_from_varmq_url_when_the_argument_is_left_out(
    store_file: str, tmp_path: Path
) -> None:
    code, out, err = _varmq("stats", "--json", env={"VARMQ_URL": store_file})
    assert code == 0, err
    assert _names(out) == ["emails"]
    code, out, err = _varmq("dead", "emails", "--limit", "5", env={"VARMQ_URL": store_file})
    assert code == 0 and "no dead letters in queue 'emails'" in out, err
    # A URL given as the argument wins over the variable.
    other = tmp_path / "other.db"
    with sqliteq.new(other) as store:
        store.new_queue("reports")
    code, out, err = _varmq("stats", str(other), "--json", env={"VARMQ_URL": store_file})
    assert code == 0 and _names(out) == ["reports"], err


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "cannot read it"), ("", "expected one store URL"), ("a\nb", "expected one")],
)
def test_a_bad_url_file_exits_2_naming_it(
    tmp_path: Path, content: str | None, message: str
) -> None:
    url_file = tmp_path / "url"
    if content is not None:
        url_file.write_text(content)
    code, out, err = _varmq("stats", "--url-file", str(url_file))
    assert (code, out) == (2, "")
    assert str(url_file) in err and message in err


def test_a_url_given_twice_exits_2(store_file: str, tmp_path: Path) -> None:
    url_file = tmp_path / "url"
    url_file.write_text(store_file)
    code, _, err = _varmq("stats", store_file, "--url-file", str(url_file))
    assert code == 2 and "give the store URL once" in err


# -- the worker command: metrics on loopback, a busy store at start-up -------------------------

_MODULE = """
import sqliteq
import varmq

def ready():
    print("ready", flush=True)

worker = varmq.new_worker(lambda job: None, 1, name="svc", on_startup=ready, auto_run=False)
queues = sqliteq.new("jobs.db", busy_timeout=0.5)  # the working directory: the test's
worker.with_distributed_queue(queues.new_distributed_queue("work"))
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.mark.parametrize(("host", "listens_on"), [(None, "127.0.0.1"), ("0.0.0.0", "0.0.0.0")])
def test_metrics_are_served_on_loopback_unless_metrics_host_says_otherwise(
    tmp_path: Path, host: str | None, listens_on: str
) -> None:
    pytest.importorskip("prometheus_client")
    (tmp_path / "svc_jobs.py").write_text(_MODULE)
    port = _free_port()
    chosen = [] if host is None else ["--metrics-host", host]
    process = subprocess.Popen(
        [
            sys.executable,
            *("-m", "varmq", "worker", "svc_jobs:worker", "--metrics-port", str(port)),
            *chosen,
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            assert b"varmq_jobs_completed_total" in answer.read()
        listening = [c for c in _listening_sockets() if c[1] == port]
        assert listening and all(address == listens_on for address, _ in listening), listening
        process.terminate()
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
    [line] = [line for line in err.splitlines() if "varmq: starting" in line]
    assert f"metrics on {listens_on}:{port}" in line


def _listening_sockets() -> list[tuple[str, int]]:
    """(address, port) of every listening TCP socket of this host, IPv4, from /proc."""
    found = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        if state != "0A":  # LISTEN
            continue
        address, port = local.split(":")
        octets = [str(int(address[i : i + 2], 16)) for i in (6, 4, 2, 0)]
        found.append((".".join(octets), int(port, 16)))
    return found


def test_a_store_locked_at_start_up_exits_3_naming_the_file_not_bad_input(
    tmp_path: Path,
) -> None:
    (tmp_path / "svc_jobs.py").write_text(_MODULE)
    path = tmp_path / "jobs.db"
    with sqliteq.new(path):
        pass  # a sqliteq file, set up
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")  # another process holds the file through the open
        done = subprocess.run(
            [sys.executable, "-m", "varmq", "worker", "svc_jobs:worker"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert done.returncode == 3, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "cannot start svc_jobs:worker: a store it opens did not answer" in line
    assert "jobs.db" in line and "busy_timeout" in line
    assert "cannot import" not in line
