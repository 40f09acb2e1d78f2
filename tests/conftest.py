"""Fixtures every test directory shares: the session's Redis database.

``redis_url`` is one Redis database for the whole session: the one ``VARMQ_TEST_REDIS_URL``
names, which must be empty (``tests/support/redis_database.py``), else database 0 of a
redis-server started here (``tests/support/redis_server.py`` says which binary, and
``VARMQ_TEST_REDIS_SERVER`` chooses another). ``redis_db`` flushes it before the test. No Redis
test is ever skipped: without a usable server the Redis tests fail and say what to install. The
summary at the end names the server binary of the session (and the database, when it is yours).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.redis_database import SuiteDatabase
from tests.support.redis_server import (
    RedisServer,
    RedisServerError,
    external_url,
    find_redis_server,
)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    try:
        found = str(find_redis_server())
    except RedisServerError as exc:
        found = f"none usable: {exc}"
    url = external_url()
    terminalreporter.write_line(
        f"redis-server: {found}" + (f"; session database: {url}" if url else "")
    )


@pytest.fixture(scope="session")
def redis_database() -> Iterator[SuiteDatabase]:
    """The session's database: ``VARMQ_TEST_REDIS_URL`` if set and empty, else a new server's."""
    url = external_url()
    server = None
    if url is None:
        server = RedisServer()
        server.start()
        url = server.url
    try:
        database = SuiteDatabase(url)
        database.claim()
        try:
            yield database
        finally:
            database.release()
    finally:
        if server is not None:
            server.close()


@pytest.fixture(scope="session")
def redis_url(redis_database: SuiteDatabase) -> str:
    """URL of the session's database; tests that use fresh queue names need no flush."""
    return redis_database.url


@pytest.fixture
def redis_db(redis_database: SuiteDatabase) -> str:
    """``redis_url`` with its database flushed before the test."""
    redis_database.flush()
    return redis_database.url
