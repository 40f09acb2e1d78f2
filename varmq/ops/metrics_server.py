"""Serving Prometheus metrics for ``varmq worker``: one process's, or a fleet's
(``--processes``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from .command_errors import CliError

__all__ = ["serve_metrics"]


def serve_metrics(args: argparse.Namespace, register: Callable[[Any], None]) -> int:
    """Serve Prometheus metrics where ``--metrics-host``/``--metrics-port`` say, with the
    collectors ``register`` adds to the default registry; the port served on."""
    try:
        from prometheus_client import REGISTRY, start_http_server
    except ImportError:
        raise CliError(
            "varmq: --metrics-port needs the prometheus extra: pip install 'varmq[prometheus]'"
        ) from None
    register(REGISTRY)
    try:
        server, _ = start_http_server(args.metrics_port, addr=args.metrics_host)
    except OSError as exc:
        raise CliError(
            f"varmq: --metrics-host {args.metrics_host} --metrics-port {args.metrics_port}: "
            f"cannot serve metrics there: {exc.strerror or exc}"
        ) from None
    return int(server.server_port)
