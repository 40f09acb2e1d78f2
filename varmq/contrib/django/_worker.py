"""What ``manage.py varmq_worker`` runs: :func:`build`, the factory ``varmq worker`` imports in
this process (and in each child with ``--processes``), which sets Django up and makes the worker
of the backend and queues the command was given (passed through the environment, which the
children of a fleet inherit)."""

from __future__ import annotations

import os
from typing import Any

#: The environment variables the command sets for :func:`build`.
BACKEND_ENV = "VARMQ_DJANGO_BACKEND"
QUEUES_ENV = "VARMQ_DJANGO_QUEUES"
CONCURRENCY_ENV = "VARMQ_DJANGO_CONCURRENCY"

__all__ = ["BACKEND_ENV", "CONCURRENCY_ENV", "QUEUES_ENV", "build"]


def build() -> Any:
    """The worker of the backend ``$VARMQ_DJANGO_BACKEND`` (default ``"default"``) on the
    queues of ``$VARMQ_DJANGO_QUEUES`` (comma-separated; every queue of the backend if unset)."""
    import django
    from django.apps import apps
    from django.core.exceptions import ImproperlyConfigured

    if not apps.ready:
        django.setup()
    from ._backend import VarmqBackend
    from ._compat import task_backends

    alias = os.environ.get(BACKEND_ENV, "default")
    backend = task_backends[alias]
    if not isinstance(backend, VarmqBackend):
        raise ImproperlyConfigured(
            f"TASKS[{alias!r}] is a {type(backend).__name__}, not varmq.contrib.django.VarmqBackend"
        )
    queues = [q for q in os.environ.get(QUEUES_ENV, "").split(",") if q]
    concurrency = os.environ.get(CONCURRENCY_ENV)
    return backend.worker(queues, int(concurrency) if concurrency else None)
