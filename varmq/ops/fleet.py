"""``varmq worker ... --processes N``: the command's side of a fleet. Builds each child's
command from the options given (every option but ``--processes``), serves the fleet's one
metrics endpoint when ``--metrics-port`` is given, and hands over to the supervisor
(:mod:`varmq.ops.supervisor`)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import tempfile
from pathlib import Path
from typing import Any

from .metrics_server import serve_metrics
from .supervisor import child_command, supervise

__all__ = ["child_arguments", "run_fleet"]

log = logging.getLogger("varmq.supervisor")


def child_arguments(args: argparse.Namespace) -> list[str]:
    """The ``varmq`` arguments of one child: this command's, without ``--processes``; a child
    serves its metrics on a loopback port of its own choosing when the fleet serves any."""
    argv = ["worker", args.target, "--grace", repr(args.grace), "--log-level", args.log_level]
    log_format = getattr(args, "log_format", "text")
    if log_format != "text":
        argv += ["--log-format", log_format]
    for queue in args.queue or ():
        argv += ["--queue", queue]
    if args.concurrency is not None:
        argv += ["--concurrency", str(args.concurrency)]
    hard_timeout = getattr(args, "hard_timeout", None)
    if hard_timeout is not None:
        argv += ["--hard-timeout", repr(hard_timeout)]
    if args.metrics_port is not None:
        argv += ["--metrics-port", "0", "--metrics-host", "127.0.0.1"]
    return argv


def run_fleet(args: argparse.Namespace, processes: int) -> int:
    """Supervise ``processes`` children running this command; the fleet's exit status."""
    with tempfile.TemporaryDirectory(prefix="varmq-fleet-") as scratch:
        port_files = {n: Path(scratch, f"child-{n}.port") for n in range(1, processes + 1)}
        env: dict[int, dict[str, str]] = {n: {} for n in port_files}
        if args.metrics_port is not None:
            from .fleet_metrics import PORT_FILE_ENV, FleetCollector

            def register(registry: Any) -> None:
                # The children's process_* and python_* families are merged in: the
                # supervisor's own, of the same names, would expose each family twice.
                from prometheus_client import GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR

                for own in (GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR):
                    with contextlib.suppress(KeyError):  # not registered: nothing to take out
                        registry.unregister(own)
                registry.register(FleetCollector(lambda: port_files))

            port = serve_metrics(args, register)
            env = {n: {PORT_FILE_ENV: str(path)} for n, path in port_files.items()}
            log.info("varmq: the fleet's metrics on %s:%d", args.metrics_host, port)
        log.info("varmq: starting %d worker processes of %s", processes, args.target)
        return supervise(
            child_command(child_arguments(args)), processes, args.grace, env.__getitem__
        )
