"""The ``varmq`` command: run workers as a service, look into stores, recover dead letters.

``varmq worker MODULE:ATTR`` runs the worker(s) that attribute names until SIGTERM or SIGINT
(see :func:`varmq.run`). ``varmq stats|watch|dead|job|requeue-dead|purge URL ...`` open the store
``URL`` names through its adapter (:func:`varmq.stores.open_store`: a SQLite file, a Redis URL,
or any scheme a third-party adapter registers) and read it through the operator view of
:mod:`varmq.ops`. ``stats``, ``watch``, ``dead`` and ``job`` only look: they open the store
read-only where its adapter can. This module parses arguments and prints; it knows no adapter.

The store URL is the ``URL`` argument, or the contents of ``--url-file FILE``, or the
environment variable ``VARMQ_URL`` when the argument is left out: the two last keep a password
out of the process list.

Exit codes: 0 done; 1 the command ran and failed or was declined (storage error, a queue whose
storage did not answer, purge not confirmed); 2 bad input: usage errors, no such file, not a
varmq store, storage unreachable, unknown queue; 3 (``varmq worker``) a store the workers open
was busy or unreachable at start-up: nothing wrong with the command, try again; 4 (``varmq
worker``) a job function ran past its timeout by more than ``--hard-timeout``: the process
ended itself, start a new one. Errors are one
line on stderr, never a traceback, and name stores by their ``location`` (URLs without
credentials). Text that came from storage (queue names, job ids, errors, results) is printed
with its control characters escaped (``\x1b``), so job data cannot move an operator's cursor
or retitle the terminal; ``--json`` output is exact JSON (its strings escape them already).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any, TextIO

from ..contract.protocols import IJobRecords
from ..model.records import JobRecord, decode_record
from .command_errors import CliError
from .stores import StoreError, location, open_store, scrub
from .view import (
    COUNTS,
    QueueRow,
    StoreView,
    UnknownQueueError,
    dead_letter_rows,
    unreachable,
)
from .worker_command import STORE_UNAVAILABLE as STORE_UNAVAILABLE
from .worker_command import _load_workers as _load_workers
from .worker_command import cmd_worker
from .worker_records import HEADER as WORKER_HEADER
from .worker_records import worker_rows

__all__ = ["main"]


# C0 and C1 controls, DEL, and the bidirectional overrides that reorder what a terminal shows.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_CONTROL_BUT_NEWLINE = re.compile(
    r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


def printable(text: str, *, lines: bool = False) -> str:
    """``text`` with every control character escaped as ``\\xNN``/``\\uNNNN`` (``lines``:
    newlines kept), for text from storage printed to a terminal."""
    pattern = _CONTROL_BUT_NEWLINE if lines else _CONTROL
    return pattern.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _queue(view: StoreView, name: str, where: str) -> Any:
    try:
        return view.queue(name)
    except UnknownQueueError as exc:
        listed = printable(", ".join(exc.known)) or "none"
        raise CliError(f"varmq: no queue named {name!r} in {where} (queues: {listed})") from None


# -- stats and watch --------------------------------------------------------------------------


def _stats_table(rows: list[QueueRow], out: TextIO) -> None:
    header = ("QUEUE", "KIND", "WAITING", "IN_FLIGHT", "DELAYED", "DEAD", "OLDEST_AGE", "RATE")
    body = [
        (
            (
                r["name"],
                r["kind"],
                *(str(int(r[k])) for k in COUNTS[:4]),
                f"{r['oldest_age']:.1f}s",
                _rate_cell(r),
            )
            if r["reachable"]
            else (r["name"], r["kind"], "unreachable", "-", "-", "-", "-", "-")
        )
        for r in rows
    ]
    _table(header, body, out)


def _rate_cell(row: QueueRow) -> str:
    """A rate-limited queue's window: ``"3 in window, throttled"``; ``"-"`` without a limit."""
    if "rate_window_used" not in row:
        return "-"
    used = f"{int(row['rate_window_used'])} in window"
    return f"{used}, throttled" if row.get("throttled") else used


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO) -> None:
    rows = [[printable(str(cell)) for cell in row] for row in rows]  # cells come from storage
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows, strict=True)]
    for row in (header, *rows):
        out.write(
            "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n"
        )


def _report_unreachable(rows: list[QueueRow], where: str) -> int:
    """Name each queue whose storage did not answer, on stderr; the exit status."""
    down = unreachable(rows)
    for row in down:
        sys.stderr.write(
            printable(f"varmq: queue {row['name']!r} in {where} is unreachable: {row['error']}")
            + "\n"
        )
    return 1 if down else 0


def cmd_stats(args: argparse.Namespace, out: TextIO) -> int:
    with open_store(args.url, read_only=True) as store:
        where = location(store, args.url)
        view = StoreView(store)
        rows = view.rows()
    if view.error is not None:
        raise CliError(f"varmq: cannot list the queues in {where}: {view.error}", 1)
    if args.json:
        out.write(json.dumps(rows, indent=2) + "\n")
    elif rows:
        _stats_table(rows, out)
    else:
        out.write(printable(f"no queues in {where}") + "\n")
    return _report_unreachable(rows, where)


def cmd_watch(args: argparse.Namespace, out: TextIO) -> int:
    if args.interval <= 0:
        raise CliError(f"varmq: --interval must be positive, got {args.interval}")
    clear = out.isatty()
    with open_store(args.url, read_only=True) as store:
        where = location(store, args.url)
        view = StoreView(store)
        shown = 0
        try:
            while args.count is None or shown < args.count:
                if shown:
                    time.sleep(args.interval)  # the refresh period itself
                rows = view.rows()
                if clear:
                    out.write("\x1b[H\x1b[2J")
                out.write(printable(f"{where}  {datetime.now().strftime('%H:%M:%S')}") + "\n")
                if view.error is not None:
                    out.write(printable(f"unreachable: {view.error}") + "\n")
                _stats_table(rows, out)
                out.flush()
                shown += 1
        except KeyboardInterrupt:
            out.write("\n")
    return 0


# -- dead letters -----------------------------------------------------------------------------


def cmd_dead(args: argparse.Namespace, out: TextIO) -> int:
    with open_store(args.url, read_only=True) as store:
        queue = _queue(StoreView(store), args.queue, location(store, args.url))
        rows = dead_letter_rows(queue.dead_letters(args.limit))
    if args.json:
        out.write(json.dumps(rows, indent=2, default=repr) + "\n")
        return 0
    if not rows:
        out.write(f"no dead letters in queue {args.queue!r}\n")
        return 0
    body = [
        (
            r["key"],
            r["id"] or "-",
            str(r["attempts"]),
            datetime.fromtimestamp(r["dead_at"], timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ"),
            _clip(r["error"], 60),
        )
        for r in rows
    ]
    _table(("KEY", "JOB_ID", "ATTEMPTS", "DEAD_AT", "ERROR"), body, out)
    return 0


# -- one job by id ----------------------------------------------------------------------------


def cmd_job(args: argparse.Namespace, out: TextIO) -> int:
    with open_store(args.url, read_only=True) as store:
        where = location(store, args.url)
        queue = _queue(StoreView(store), args.queue, where)
        if not isinstance(queue, IJobRecords):
            raise CliError(
                f"varmq: queue {args.queue!r} in {where} keeps no job records (its adapter does "
                "not implement varmq.contract.protocols.IJobRecords)"
            )
        # Records are read whatever keep_results the object opened here has: they are kept
        # by the producers and workers that opened the queue with it.
        stored = queue.job_record(args.job_id)
    if stored is None:
        raise CliError(
            f"varmq: queue {args.queue!r} has no record of job {args.job_id!r} (never added "
            "with that id, its record expired, or the queue is not opened with keep_results)",
            1,
        )
    record = decode_record(stored)
    if args.json:
        out.write(json.dumps(dataclasses.asdict(record), indent=2, default=repr) + "\n")
        return 0
    _job_lines(record, out)
    return 0


def _job_lines(record: JobRecord, out: TextIO) -> None:
    def when(stamp: float | None) -> str:
        if stamp is None:
            return "-"
        return datetime.fromtimestamp(stamp, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%fZ")

    rows = [
        ("id", record.id),
        ("state", record.state + (" (cancel requested)" if record.cancel_requested else "")),
        ("attempts", str(record.attempts)),
        ("enqueued", when(record.enqueued_at)),
        ("started", when(record.started_at)),
        ("finished", when(record.finished_at)),
    ]
    if record.progress is not None:
        message = record.progress.message
        rows.append(
            ("progress", f"{record.progress.fraction:.0%}" + (f" {message}" if message else ""))
        )
    if record.state == "succeeded":
        rows.append(("result", json.dumps(record.result, default=repr)))
    if record.error is not None:
        rows.append(("error", f"{record.error.type}: {record.error.message}"))
    for key, value in rows:
        out.write(f"{key + ':':<10} {printable(value)}\n")
    if record.error is not None and record.error.traceback:
        out.write(printable(record.error.traceback.rstrip("\n"), lines=True) + "\n")


def _clip(text: str, width: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def cmd_workers(args: argparse.Namespace, out: TextIO) -> int:
    with open_store(args.url, read_only=True) as store:
        where = location(store, args.url)
        if not callable(getattr(store, "workers", None)):
            raise CliError(f"varmq: {where} does not list workers (its adapter has no workers())")
        infos = store.workers()
    if args.json:
        out.write(json.dumps([info.as_dict() for info in infos], indent=2) + "\n")
    elif infos:
        _table(WORKER_HEADER, worker_rows(infos), out)
    else:
        out.write(printable(f"no workers in {where}") + "\n")
    return 0


def cmd_requeue_dead(args: argparse.Namespace, out: TextIO) -> int:
    if args.all == bool(args.keys):
        raise CliError("varmq: requeue-dead needs either --all or dead-letter KEYs (not both)")
    with open_store(args.url) as store:
        queue = _queue(StoreView(store), args.queue, location(store, args.url))
        n = queue.requeue_dead(None if args.all else list(args.keys))
    out.write(f"requeued {n} dead letter{'s' if n != 1 else ''} of queue {args.queue!r}\n")
    if args.keys and n < len(args.keys):
        sys.stderr.write(f"varmq: {len(args.keys) - n} of the keys were not dead letters\n")
        return 1
    return 0


def cmd_purge(args: argparse.Namespace, out: TextIO) -> int:
    with open_store(args.url) as store:
        queue = _queue(StoreView(store), args.queue, location(store, args.url))
        what = "dead letters" if args.dead else "waiting jobs"
        count = int(queue.stats()["dead" if args.dead else "waiting"])
        if not args.yes and not _confirm(f"Delete {count} {what} of queue {args.queue!r}?"):
            sys.stderr.write("varmq: not confirmed; nothing deleted\n")
            return 1
        if args.dead:
            count = queue.purge_dead()
        else:
            queue.purge()
    out.write(f"purged {count} {what} of queue {args.queue!r}\n")
    return 0


def _confirm(question: str) -> bool:
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


# The commands that open a store, with how many positionals they need after URL; options that
# take a value (to count positionals right).
_AFTER_URL = {
    "stats": 0,
    "watch": 0,
    "workers": 0,
    "dead": 1,
    "job": 2,
    "requeue-dead": 1,
    "purge": 1,
}
_VALUED = {"--interval", "--count", "--limit", "--url-file"}
URL_VARIABLE = "VARMQ_URL"
"""The environment variable a store URL is read from when the command line gives none."""


def _url_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("url", metavar="URL", help="SQLite file, Redis URL or another store's URL")
    # Read and taken out of the arguments by _with_url before argparse sees them; listed here
    # for --help only.
    p.add_argument(
        "--url-file",
        metavar="FILE",
        help=f"read URL from FILE instead (or leave URL out and set {URL_VARIABLE})",
    )


def _with_url(argv: list[str]) -> list[str]:
    """``argv`` with the store URL put in as the URL argument when it comes from
    ``--url-file FILE`` or, the argument being left out, from ``VARMQ_URL``."""
    command_at = next((i for i, a in enumerate(argv) if not a.startswith("-")), None)
    if command_at is None or argv[command_at] not in _AFTER_URL:
        return argv
    command, rest = argv[command_at], argv[command_at + 1 :]
    url_file, kept, positionals, i = None, [], 0, 0
    while i < len(rest):
        arg = rest[i]
        if arg == "--url-file" or arg.startswith("--url-file="):
            if "=" in arg:
                url_file = arg.partition("=")[2]
            elif i + 1 < len(rest):
                url_file, i = rest[i + 1], i + 1
            else:
                raise CliError("varmq: --url-file needs a FILE")
        else:
            kept.append(arg)
            if arg in _VALUED and i + 1 < len(rest):
                kept.append(rest[i + 1])
                i += 1
            elif not arg.startswith("-"):
                positionals += 1
        i += 1
    needed = _AFTER_URL[command]
    if url_file is not None:
        if positionals > needed and command != "requeue-dead":
            raise CliError("varmq: give the store URL once: as URL or with --url-file, not both")
        url = _read_url_file(url_file)
    elif positionals == needed and os.environ.get(URL_VARIABLE, "").strip():
        url = os.environ[URL_VARIABLE].strip()
    else:
        return argv
    return [*argv[: command_at + 1], url, *kept]


def _read_url_file(name: str) -> str:
    try:
        text = open(name, encoding="utf-8").read().strip()  # noqa: SIM115 - read whole, closed
    except OSError as exc:
        raise CliError(f"varmq: --url-file {name}: cannot read it: {exc.strerror or exc}") from None
    if not text or "\n" in text:
        raise CliError(f"varmq: --url-file {name}: expected one store URL on one line")
    return text


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="varmq",
        description="Run varmq workers, and inspect varmq queues in a SQLite file, on Redis, or "
        "in any store whose adapter registers its URL scheme.",
        epilog="URL: a SQLite file (sqlite: prefix optional), a redis://, rediss:// or unix:// "
        "URL, or a URL an installed adapter takes; or leave URL out and give --url-file FILE "
        "or the environment variable VARMQ_URL, which keep a password out of the process "
        "list. stats, watch, dead and job open it read-only. "
        "Exit codes: 0 ok, 1 failed or not confirmed, 2 bad input, 3 store busy at start-up, "
        "4 (worker) a job ran past its hard timeout.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "worker",
        help="run workers until SIGTERM/SIGINT, then stop them gracefully",
        description="Import MODULE:ATTR (a worker, a zero-argument callable returning one "
        "or several, or a varmq.App: a worker running its tasks) and run it until SIGTERM or "
        "SIGINT. On the first signal the workers stop "
        "taking jobs, hand taken jobs that have not started back to storage, and give running "
        "jobs --grace seconds; a second signal stops waiting. Exit 0 after a clean drain, 1 "
        "when jobs were left running (their leases bring them back elsewhere), 2 for bad "
        "input, 3 when a store was busy or unreachable at start-up, 4 when a job function ran "
        "past its timeout by more than --hard-timeout (or its worker's hard_timeout): the "
        "process ended itself; start a new one. With --processes N, a supervisor runs N such "
        "processes and exits with the worst of their statuses.",
    )
    p.add_argument("target", metavar="MODULE:ATTR", help="e.g. myapp.jobs:worker, myapp.tasks:app")
    p.add_argument(
        "--queue",
        action="append",
        metavar="Q",
        help="for an App: run the tasks of this queue (repeat it; every queue of the app if none)",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        metavar="N",
        help="for an App: tasks run at once (default: the CPU count)",
    )
    p.add_argument("--grace", type=float, default=30.0, help="seconds running jobs get (30)")
    p.add_argument(
        "--hard-timeout",
        type=float,
        metavar="S",
        help="end this process (exit 4) when a plain job function runs S seconds past its "
        "job's timeout, its other running jobs handed back to storage first (sets hard_timeout "
        "on each worker that has none); with --processes the supervisor starts a new child",
    )
    p.add_argument(
        "--processes",
        default="1",
        metavar="N",
        help="run N consumer processes under one supervisor (auto: one per CPU; default 1, "
        "this process): it restarts a child that dies, forwards SIGTERM/SIGINT to all, and "
        "exits with the worst child status",
    )
    p.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="logging level (info)",
    )
    p.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="text lines, or one JSON object per line with the queue, job id, attempt, task "
        "and (when varmq.otel traces) the trace and span ids of the job it is about (text)",
    )
    p.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port")
    p.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        help="address the metrics are served on (127.0.0.1: this host only; 0.0.0.0: all "
        "interfaces, which anyone who can reach the port can read)",
    )
    p.set_defaults(run=cmd_worker)

    p = sub.add_parser("stats", help="counts of every queue")
    _url_arguments(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=cmd_stats)

    p = sub.add_parser("watch", help="counts of every queue, refreshed")
    _url_arguments(p)
    p.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes (2)")
    p.add_argument("--count", type=_positive_int, help="stop after N refreshes")
    p.set_defaults(run=cmd_watch)

    p = sub.add_parser("workers", help="the workers of every process consuming the store's queues")
    _url_arguments(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=cmd_workers)

    p = sub.add_parser("dead", help="list a queue's dead letters, oldest first")
    _url_arguments(p)
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--limit", type=_positive_int, default=100, help="at most N (100)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=cmd_dead)

    p = sub.add_parser("job", help="one job's record: state, attempts, times, result or error")
    _url_arguments(p)
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("job_id", metavar="ID", help="the job id it was added with")
    p.add_argument("--json", action="store_true", help="print JSON instead of lines")
    p.set_defaults(run=cmd_job)

    p = sub.add_parser("requeue-dead", help="put dead letters back in line")
    _url_arguments(p)
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("keys", metavar="KEY", nargs="*", help="dead-letter keys (see `varmq dead`)")
    p.add_argument("--all", action="store_true", help="every dead letter of the queue")
    p.set_defaults(run=cmd_requeue_dead)

    p = sub.add_parser("purge", help="delete a queue's waiting jobs (or, --dead, dead letters)")
    _url_arguments(p)
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--dead", action="store_true", help="delete the dead letters instead")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(run=cmd_purge)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (the console script exits with it)."""
    parser = _parser()
    try:
        argv = _with_url(list(sys.argv[1:] if argv is None else argv))
    except CliError as exc:
        sys.stderr.write(f"{exc}\n")
        return exc.code
    # KEYs may come after --all (`requeue-dead URL Q --all k1`); argparse stops collecting
    # positionals at the first option, so gather the rest here and let the command decide.
    args, extra = parser.parse_known_args(argv)
    if extra:
        if args.command != "requeue-dead" or any(e.startswith("-") for e in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.keys = [*args.keys, *extra]
    run: Callable[[argparse.Namespace, TextIO], int] = args.run
    try:
        return run(args, sys.stdout)
    except CliError as exc:
        sys.stderr.write(f"{exc}\n")
        return exc.code
    except StoreError as exc:
        sys.stderr.write(f"{exc}\n")
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a storage failure mid-command: one line, not a traceback
        message = f"varmq: {args.command} failed: {type(exc).__name__}: {exc}"
        sys.stderr.write(printable(scrub(message, getattr(args, "url", "") or "")) + "\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
