"""Settings of the example project: Django's own database and the varmq store are SQLite files
beside it unless ``DJANGO_DB`` and ``VARMQ_URL`` say otherwise (the tests point them at a
temporary directory)."""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "example-only-not-secret"
DEBUG = True
USE_TZ = True
INSTALLED_APPS = ["varmq.contrib.django", "shop"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DJANGO_DB", str(BASE_DIR / "db.sqlite3")),
    }
}
TASKS = {
    "default": {
        "BACKEND": "varmq.contrib.django.VarmqBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"url": os.environ.get("VARMQ_URL", f"sqlite:{BASE_DIR / 'jobs.db'}")},
    }
}
