"""The ``varmq`` command: run workers as a service, look into stores, recover dead letters.

``varmq worker MODULE:ATTR`` runs the worker(s) that attribute names until SIGTERM or SIGINT
(see :func:`varmq.run`). ``varmq stats|watch|dead|job|requeue-dead|purge URL ...`` open the store
``URL`` names through its adapter (:func:`varmq.stores.open_store`: a SQLite file, a Redis URL,
or any scheme a third-party adapter registers) and read it through the operator view of
:mod:`varmq.ops`. ``stats``, ``watch``, ``dead`` and ``job`` only look: they open the store
read-only where its adapter can. This module parses arguments and prints; it knows no adapter.

Exit codes: 0 done; 1 the command ran and failed or was declined (storage error, a queue whose
storage did not answer, purge not confirmed); 2 bad input: usage errors, no such file, not a
varmq store, storage unreachable, unknown queue. Errors are one line on stderr, never a
traceback, and name stores by their ``location`` (URLs without credentials).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any, TextIO

from ..contract.protocols import IJobRecords
from ..model.records import JobRecord, decode_record
from .stores import StoreError, location, open_store, scrub
from .view import (
    COUNTS,
    QueueRow,
    StoreView,
    UnknownQueueError,
    dead_letter_rows,
    sources,
    unreachable,
)

__all__ = ["main"]


class CliError(Exception):
    """A failure to report on one line, with its exit code."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def _queue(view: StoreView, name: str, where: str) -> Any:
    try:
        return view.queue(name)
    except UnknownQueueError as exc:
        listed = ", ".join(exc.known) or "none"
        raise CliError(f"varmq: no queue named {name!r} in {where} (queues: {listed})") from None


# -- stats and watch --------------------------------------------------------------------------


def _stats_table(rows: list[QueueRow], out: TextIO) -> None:
    header = ("QUEUE", "KIND", "WAITING", "IN_FLIGHT", "DELAYED", "DEAD", "OLDEST_AGE")
    body = [
        (
            (r["name"], r["kind"], *(str(int(r[k])) for k in COUNTS[:4]), f"{r['oldest_age']:.1f}s")
            if r["reachable"]
            else (r["name"], r["kind"], "unreachable", "-", "-", "-", "-")
        )
        for r in rows
    ]
    _table(header, body, out)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO) -> None:
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
            f"varmq: queue {row['name']!r} in {where} is unreachable: {row['error']}\n"
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
        out.write(f"no queues in {where}\n")
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
                out.write(f"{where}  {datetime.now().strftime('%H:%M:%S')}\n")
                if view.error is not None:
                    out.write(f"unreachable: {view.error}\n")
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
    if record.state == "succeeded":
        rows.append(("result", json.dumps(record.result, default=repr)))
    if record.error is not None:
        rows.append(("error", f"{record.error.type}: {record.error.message}"))
    for key, value in rows:
        out.write(f"{key + ':':<10} {value}\n")
    if record.error is not None and record.error.traceback:
        out.write(record.error.traceback.rstrip("\n") + "\n")


def _clip(text: str, width: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


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


def _load_workers(target: str) -> list[Any]:
    """The workers ``MODULE:ATTR`` names: a worker, or a zero-argument callable returning one
    or several."""
    import importlib

    from ..api.worker import BaseWorker

    module_name, colon, attribute = target.partition(":")
    if not colon or not module_name or not attribute:
        raise CliError(f"varmq: expected MODULE:ATTR (e.g. myapp.jobs:worker), got {target!r}")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does: the project's own modules
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as exc:  # not found, or the module itself raised while importing
        raise CliError(
            f"varmq: cannot import {module_name!r}: {type(exc).__name__}: {_one_line(exc)}"
        ) from None
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise CliError(f"varmq: {module_name!r} has no attribute {attribute!r}") from None
    if not isinstance(found, BaseWorker) and callable(found):
        try:
            found = found()
        except Exception as exc:
            raise CliError(
                f"varmq: calling {target} raised {type(exc).__name__}: {_one_line(exc)}"
            ) from None
    if isinstance(found, BaseWorker):
        workers = [found]
    elif isinstance(found, list | tuple | set | frozenset):
        workers = list(found)
    else:
        workers = []
    if not workers or not all(isinstance(w, BaseWorker) for w in workers):
        raise CliError(
            f"varmq: {target} is not a worker, nor a callable returning one or several workers"
        )
    return workers


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def cmd_worker(args: argparse.Namespace, out: TextIO) -> int:
    import logging

    from .service import run

    if args.grace < 0:
        raise CliError(f"varmq: --grace must be >= 0 seconds, got {args.grace}")
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    workers = _load_workers(args.target)
    if args.metrics_port is not None:
        try:
            from prometheus_client import start_http_server

            from .prometheus import VarmqCollector
        except ImportError:
            raise CliError(
                "varmq: --metrics-port needs the prometheus extra: pip install 'varmq[prometheus]'"
            ) from None
        VarmqCollector(workers)
        try:
            start_http_server(args.metrics_port)
        except OSError as exc:
            raise CliError(
                f"varmq: --metrics-port {args.metrics_port}: cannot serve metrics there: "
                f"{exc.strerror or exc}"
            ) from None
    logging.getLogger("varmq.service").info("%s", _starting(workers, args))
    return run(*workers, grace=args.grace)


def _starting(workers: list[Any], args: argparse.Namespace) -> str:
    """The start-up line: each worker, its concurrency and queues (stores redacted), metrics."""
    from .service import plural  # as in cmd_worker: only `varmq worker` needs the service

    described = []
    for worker in workers:
        queues = [
            repr(s.storage) if hasattr(s, "storage") else f"{s.label!r} (memory)"
            for s in sources(worker)
        ]
        described.append(
            f"{worker.name or 'unnamed worker'} (concurrency {worker.num_concurrency}; "
            f"{', '.join(queues) or 'no queue bound yet'})"
        )
    metrics = (
        f"metrics on port {args.metrics_port}" if args.metrics_port is not None else "no metrics"
    )
    return (
        f"varmq: starting {plural(len(workers), 'worker')}, grace "
        f"{args.grace:g} s, {metrics}: {'; '.join(described)}"
    )


# -- argument parsing -------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="varmq",
        description="Run varmq workers, and inspect varmq queues in a SQLite file, on Redis, or "
        "in any store whose adapter registers its URL scheme.",
        epilog="URL: a SQLite file (sqlite: prefix optional), a redis://, rediss:// or unix:// "
        "URL, or a URL an installed adapter takes. stats, watch, dead and job open it "
        "read-only. "
        "Exit codes: 0 ok, 1 failed or not confirmed, 2 bad input.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    url_help = "SQLite file, Redis URL or another store's URL"

    p = sub.add_parser(
        "worker",
        help="run workers until SIGTERM/SIGINT, then stop them gracefully",
        description="Import MODULE:ATTR (a worker, or a zero-argument callable returning one "
        "or several) and run it until SIGTERM or SIGINT. On the first signal the workers stop "
        "taking jobs, hand taken jobs that have not started back to storage, and give running "
        "jobs --grace seconds; a second signal stops waiting. Exit 0 after a clean drain, 1 "
        "when jobs were left running (their leases bring them back elsewhere).",
    )
    p.add_argument("target", metavar="MODULE:ATTR", help="e.g. myapp.jobs:worker")
    p.add_argument("--grace", type=float, default=30.0, help="seconds running jobs get (30)")
    p.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="logging level (info)",
    )
    p.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port")
    p.set_defaults(run=cmd_worker)

    p = sub.add_parser("stats", help="counts of every queue")
    p.add_argument("url", metavar="URL", help=url_help)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=cmd_stats)

    p = sub.add_parser("watch", help="counts of every queue, refreshed")
    p.add_argument("url", metavar="URL", help=url_help)
    p.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes (2)")
    p.add_argument("--count", type=_positive_int, help="stop after N refreshes")
    p.set_defaults(run=cmd_watch)

    p = sub.add_parser("dead", help="list a queue's dead letters, oldest first")
    p.add_argument("url", metavar="URL", help=url_help)
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--limit", type=_positive_int, default=100, help="at most N (100)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=cmd_dead)

    p = sub.add_parser("job", help="one job's record: state, attempts, times, result or error")
    p.add_argument("url", metavar="URL", help=url_help)
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("job_id", metavar="ID", help="the job id it was added with")
    p.add_argument("--json", action="store_true", help="print JSON instead of lines")
    p.set_defaults(run=cmd_job)

    p = sub.add_parser("requeue-dead", help="put dead letters back in line")
    p.add_argument("url", metavar="URL", help=url_help)
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("keys", metavar="KEY", nargs="*", help="dead-letter keys (see `varmq dead`)")
    p.add_argument("--all", action="store_true", help="every dead letter of the queue")
    p.set_defaults(run=cmd_requeue_dead)

    p = sub.add_parser("purge", help="delete a queue's waiting jobs (or, --dead, dead letters)")
    p.add_argument("url", metavar="URL", help=url_help)
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--dead", action="store_true", help="delete the dead letters instead")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(run=cmd_purge)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (the console script exits with it)."""
    parser = _parser()
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
        sys.stderr.write(scrub(message, getattr(args, "url", "")) + "\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
