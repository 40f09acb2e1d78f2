"""The Tasks framework this backend implements: Django 6's ``django.tasks``, or the
``django-tasks`` backport (``django_tasks``, for Django 4.2 to 5.2 on Python 3.10+), which has
the same API under other module names. Everything else imports these names from here."""

from __future__ import annotations

from typing import Any

try:  # Django 6.0 and later
    from django.tasks import DEFAULT_TASK_QUEUE_NAME, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django.tasks.exceptions import InvalidTask as InvalidTaskError
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.utils.json import normalize_json

    FRAMEWORK = "django.tasks"
except ImportError:  # the backport
    try:
        from django_tasks import DEFAULT_TASK_QUEUE_NAME, task_backends
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
        from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist
        from django_tasks.utils import normalize_json
    except ImportError as exc:  # pragma: no cover - the message is the point
        raise ImportError(
            "varmq.contrib.django needs Django 6's django.tasks, or on an older Django the "
            "django-tasks backport: pip install 'varmq[django]'"
        ) from exc
    FRAMEWORK = "django_tasks"

__all__ = [
    "DEFAULT_TASK_QUEUE_NAME",
    "FRAMEWORK",
    "BaseTaskBackend",
    "InvalidTaskError",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "module_path",
    "normalize_json",
    "task_backends",
]


def module_path(value: Any) -> str:
    """``module.qualname`` of a class or function (what ``TaskError`` and ``Task`` name)."""
    return f"{value.__module__}.{value.__qualname__}"
