"""The acceptance tests run real processes against deadlines: marked ``serial``, so that the
test command runs them alone, after the tests it runs several at a time. The snapshot crash
test is the exception: what it checks (the file is the old snapshot or the new one after every
kill) holds however slowly it runs."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

_ANY_PACE = ("tests/acceptance/test_snapshot_crashes.py",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith("tests/acceptance/") and not item.nodeid.startswith(_ANY_PACE):
            item.add_marker(pytest.mark.serial)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    """The processes a test started, killed (if still running) and waited for after it."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()
