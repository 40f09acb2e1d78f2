"""The Django app that brings ``manage.py varmq_worker``."""

from __future__ import annotations

from django.apps import AppConfig


class VarmqConfig(AppConfig):
    """``"varmq.contrib.django"`` in ``INSTALLED_APPS``."""

    name = "varmq.contrib.django"
    label = "varmq"
    verbose_name = "varmq"
