"""``python manage.py varmq_worker``: run the tasks of a varmq backend until SIGTERM/SIGINT,
with the signals, grace and exit statuses of ``varmq worker`` (it is that command, run on
:func:`varmq.contrib.django._worker.build`)."""

from __future__ import annotations

import os
import sys
from typing import Any, ClassVar

from django.core.management.base import BaseCommand, CommandParser

from varmq.contrib.django._worker import BACKEND_ENV, CONCURRENCY_ENV, QUEUES_ENV


class Command(BaseCommand):
    help = (
        "Run the tasks of a varmq.contrib.django.VarmqBackend until SIGTERM or SIGINT, then "
        "stop gracefully (the exit statuses of `varmq worker`: 0 after a clean drain, 1 with "
        "jobs left running, 2 for bad input, 3 when the store was unreachable at start-up, 4 "
        "past --hard-timeout)."
    )
    requires_system_checks: ClassVar[list[str]] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queue",
            action="append",
            metavar="Q",
            help="a queue to run (repeat it; every queue of the backend's QUEUES if none)",
        )
        parser.add_argument("--concurrency", type=int, metavar="N", help="tasks run at once")
        parser.add_argument(
            "--processes",
            default="1",
            metavar="N",
            help="consumer processes under one supervisor (auto: one per CPU; default 1)",
        )
        parser.add_argument("--backend", default="default", help="the TASKS alias (default)")
        parser.add_argument("--grace", type=float, default=30.0, help="seconds running tasks get")
        parser.add_argument("--hard-timeout", type=float, metavar="S")
        parser.add_argument(
            "--log-format", default="text", choices=["text", "json"], help="text or json lines"
        )
        parser.add_argument("--metrics-port", type=int, help="serve Prometheus metrics")

    def handle(self, *args: Any, **options: Any) -> None:
        from varmq.ops.cli import main

        os.environ[BACKEND_ENV] = options["backend"]
        os.environ[QUEUES_ENV] = ",".join(options["queue"] or ())
        if options["concurrency"] is not None:
            os.environ[CONCURRENCY_ENV] = str(options["concurrency"])
        argv = [
            "worker",
            "varmq.contrib.django._worker:build",
            "--grace",
            repr(options["grace"]),
            "--processes",
            str(options["processes"]),
            "--log-format",
            options["log_format"],
        ]
        if options["hard_timeout"] is not None:
            argv += ["--hard-timeout", repr(options["hard_timeout"])]
        if options["metrics_port"] is not None:
            argv += ["--metrics-port", str(options["metrics_port"])]
        sys.exit(main(argv))
