"""varmq as a backend of Django's Tasks framework (``django.tasks`` on Django 6, the
``django-tasks`` backport before it).

.. code-block:: python

    # settings.py
    INSTALLED_APPS = [..., "varmq.contrib.django"]
    TASKS = {
        "default": {
            "BACKEND": "varmq.contrib.django.VarmqBackend",
            "QUEUES": ["default"],
            "OPTIONS": {"url": "sqlite:/var/lib/myapp/jobs.db"},
        }
    }

then ``my_task.enqueue(...)`` in the app and ``python manage.py varmq_worker`` to run them.
docs/django.md has the options, the worker command and what each capability does.
"""

from __future__ import annotations

from ._backend import TaskRaised, VarmqBackend

__all__ = ["TaskRaised", "VarmqBackend"]
