"""Every acceptance test runs real processes against deadlines: marked ``serial``, so that the
test command runs them alone, after the tests it runs two at a time."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/acceptance/" in item.nodeid:
            item.add_marker(pytest.mark.serial)
