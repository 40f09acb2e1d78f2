"""What the process tests share: starting an actor module as a process, reading its output
until a line, and the store a parametrized test runs on (the ``processes`` fixture that ends
them is in ``conftest.py``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import pytest

__all__ = ["ROOT", "STORES", "expect_line", "spawn", "store_url"]

ROOT = Path(__file__).resolve().parents[2]
STORES = ("sqliteq", "redisq")
"""The stores a process test runs on (redisq: the test session's redis-server)."""


def spawn(
    module: str, *args: str, stdout: int | IO[Any] = subprocess.PIPE
) -> subprocess.Popen[str]:
    """``python -m module args`` from the repository's root, its output read as text."""
    return subprocess.Popen(
        [sys.executable, "-m", module, *args], cwd=ROOT, stdout=stdout, text=True
    )


def expect_line(process: subprocess.Popen[str], wanted: str) -> None:
    """Read ``process``'s output until the line ``wanted`` (a blocking read, no polling)."""
    assert process.stdout is not None
    for line in process.stdout:
        if line.strip() == wanted:
            return
    raise AssertionError(f"the process ended before it printed {wanted!r}")


def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of the store ``request.param`` names: a sqliteq file in ``tmp_path``, or the
    session's redis-server."""
    if request.param == "redisq":
        url: str = request.getfixturevalue("redis_url")
        return url
    return f"sqlite:{tmp_path / 'jobs.db'}"
