"""``varmq worker MODULE:ATTR``: load the workers a module names (a worker, a factory, a
``varmq.App``), serve their metrics, and run them until SIGTERM (:func:`varmq.run`), or hand
over to a supervisor of several processes (``--processes``, :mod:`varmq.ops.fleet`)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import types
from collections.abc import Sequence
from typing import Any, TextIO

from .command_errors import CliError

__all__ = ["STORE_UNAVAILABLE", "cmd_worker"]

STORE_UNAVAILABLE = 3
"""Exit status of ``varmq worker`` when a store was locked or unreachable at start-up."""


def _load_workers(
    target: str, queues: Sequence[str] = (), concurrency: int | None = None
) -> list[Any]:
    """The workers ``MODULE:ATTR`` names: a worker, a zero-argument callable returning one
    or several, or a :class:`varmq.App` (its worker on ``queues``, every queue of the app when
    none is named, with ``concurrency``)."""
    import importlib

    from ..api.worker import BaseWorker
    from ..tasks.app import App

    module_name, colon, attribute = target.partition(":")
    if not colon or not module_name or not attribute:
        raise CliError(f"varmq: expected MODULE:ATTR (e.g. myapp.jobs:worker), got {target!r}")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does: the project's own modules
    try:
        if module_name.endswith(".py"):
            # A script's factory (varmq.run(factory, processes=N) from a script): its code runs
            # under another name than __main__, so its own varmq.run is not called again.
            import runpy

            found: Any = types.SimpleNamespace(
                **runpy.run_path(module_name, run_name="__varmq_child__")
            )
        else:
            found = importlib.import_module(module_name)
    except OSError as exc:  # a store it opens is locked or unreachable: busy, not bad input
        raise _store_unavailable(target, exc) from None
    except Exception as exc:  # not found, or the module itself raised while importing
        raise CliError(
            f"varmq: cannot import {module_name!r}: {type(exc).__name__}: {_one_line(exc)}"
        ) from None
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise CliError(f"varmq: {module_name!r} has no attribute {attribute!r}") from None
    if isinstance(found, App):
        try:
            # Not started: varmq.run starts it once its signal handlers are in place.
            return [found.worker(*queues, concurrency=concurrency or 0, auto_run=False)]
        except OSError as exc:
            raise _store_unavailable(target, exc) from None
        except (TypeError, ValueError) as exc:
            raise CliError(f"varmq: {target}: {_one_line(exc)}") from None
    if queues or concurrency is not None:
        raise CliError("varmq: --queue and --concurrency are for an App target (MODULE:APP)")
    if not isinstance(found, BaseWorker) and callable(found):
        try:
            found = found()
        except OSError as exc:
            raise _store_unavailable(target, exc) from None
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


def _store_unavailable(target: str, exc: OSError) -> CliError:
    """The error of a start-up whose store was locked or unreachable: exit 3, not bad input."""
    return CliError(
        f"varmq: cannot start {target}: a store it opens did not answer: "
        f"{type(exc).__name__}: {_one_line(exc)}",
        STORE_UNAVAILABLE,
    )


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def cmd_worker(args: argparse.Namespace, out: TextIO) -> int:

    from .service import run

    if args.grace < 0:
        raise CliError(f"varmq: --grace must be >= 0 seconds, got {args.grace}")
    if getattr(args, "log_format", "text") == "json":
        from .json_logs import use_json_logs

        use_json_logs(args.log_level)
    else:
        logging.basicConfig(
            level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    if args.concurrency is not None and args.concurrency < 1:
        raise CliError(f"varmq: --concurrency must be at least 1, got {args.concurrency}")
    processes = _processes(args.processes)
    if processes > 1:
        from .fleet import run_fleet

        return run_fleet(args, processes)
    from .supervisor import watch_parent

    watch_parent()  # a child of a supervisor stops once its supervisor is gone

    # A stop asked for while the module imports (a supervisor stopping a child it just
    # started, an operator quick on Ctrl-C) ends the command at once, cleanly: nothing runs
    # yet. run() replaces this handler with its own before it starts any worker.
    def stop_start_up(signum: int, frame: object) -> None:
        raise _StoppedAtStartUp(signal.Signals(signum).name)

    previous = {}
    if threading.current_thread() is threading.main_thread():  # where signals are handled
        previous = {
            sig: signal.signal(sig, stop_start_up) for sig in (signal.SIGTERM, signal.SIGINT)
        }
    try:
        workers = _load_workers(args.target, args.queue or (), args.concurrency)
        if args.hard_timeout is not None:
            from .service import apply_hard_timeout

            try:
                apply_hard_timeout(workers, args.hard_timeout, option="--hard-timeout")
            except (TypeError, ValueError) as exc:
                raise CliError(str(exc)) from None
        if args.metrics_port is not None:
            from .fleet_metrics import write_port
            from .metrics_server import serve_metrics

            write_port(serve_metrics(args, lambda registry: _collect(registry, workers)))
        logging.getLogger("varmq.service").info("%s", _starting(workers, args))
        return run(*workers, grace=args.grace)
    except _StoppedAtStartUp as stopped:
        logging.getLogger("varmq.service").info("varmq: %s during start-up: not starting", stopped)
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _StoppedAtStartUp(BaseException):
    """SIGTERM or SIGINT came before the workers started (a BaseException: no ``except
    Exception`` of the module being imported swallows it)."""


def _processes(value: str) -> int:
    """``--processes``: a count, or ``auto`` for the CPU count."""
    if value == "auto":
        return os.cpu_count() or 1
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise CliError(f"varmq: --processes takes a count of at least 1 or auto, got {value!r}")
    return count


def _collect(registry: Any, workers: list[Any]) -> None:
    from .prometheus import VarmqCollector

    VarmqCollector(workers, registry=registry)


def _starting(workers: list[Any], args: argparse.Namespace) -> str:
    """The start-up line: each worker, its concurrency and queues (stores redacted), metrics."""
    from .service import plural  # as in cmd_worker: only `varmq worker` needs the service
    from .view import sources  # here: at the top it would make the import chain 11 deep

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
        f"metrics on {args.metrics_host}:{args.metrics_port}"
        if args.metrics_port is not None
        else "no metrics"
    )
    return (
        f"varmq: starting {plural(len(workers), 'worker')}, grace "
        f"{args.grace:g} s, {metrics}: {'; '.join(described)}"
    )


# -- argument parsing -------------------------------------------------------------------------
