"""Integrations with frameworks, each imported only by a program that uses it:
:mod:`varmq.contrib.django` (a ``django.tasks`` backend and ``manage.py varmq_worker``)."""
