"""The Redis test harness itself: whose database it flushes, and which servers it accepts.

The suite flushes its Redis database before every Redis test, so it must never be handed one
that holds somebody's data: ``REDIS_URL`` (an application's own Redis on most platforms) is
ignored, and ``VARMQ_TEST_REDIS_URL`` is taken only when that database is empty. Each test here
starts a redis-server of its own and puts an application's key in it first.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.redis_database import ForeignKeysError, SuiteDatabase
from tests.support.redis_server import (
    ENV_SERVER,
    ENV_URL,
    RedisServer,
    RedisServerError,
    find_redis_server,
    parse_version_banner,
)

ROOT = Path(__file__).resolve().parent.parent
# One Redis test that flushes the session's database first (through ``redis_db``).
FLUSHING_TEST = "tests/adapters/test_redisq.py::test_fifo_queue_hands_jobs_out_in_enqueue_order"
APP_KEY = "app:session:42"
QUEUE_KEY = "redisq:{q}:seq"


@pytest.fixture
def own_redis() -> Iterator[str]:
    """The URL of an empty redis-server of this test's own."""
    server = RedisServer()
    server.start()
    try:
        yield server.url
    finally:
        server.close()


@pytest.fixture
def app_redis(own_redis: str) -> str:
    """``own_redis`` holding one application key."""
    with redis.Redis.from_url(own_redis) as client:
        client.set(APP_KEY, b"somebody's data")
    return own_redis


@pytest.fixture
def claimed(own_redis: str) -> Iterator[tuple[SuiteDatabase, redis.Redis]]:
    """``own_redis`` taken by a :class:`SuiteDatabase`, then given a queue key; and a client."""
    database = SuiteDatabase(own_redis)
    database.claim()
    with redis.Redis.from_url(own_redis) as client:
        client.set(QUEUE_KEY, 1)
        yield database, client


def _app_key_left(url: str) -> bool:
    with redis.Redis.from_url(url) as client:
        return bool(client.get(APP_KEY) == b"somebody's data")


def _run_suite(test: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run one test in a pytest of its own, with ``env`` on top of this environment."""
    environ = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", ENV_URL)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
        cwd=ROOT,
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_suite_leaves_the_database_redis_url_names_alone(app_redis: str) -> None:
    run = _run_suite(f"{FLUSHING_TEST}[redis]", REDIS_URL=app_redis)
    assert run.returncode == 0, run.stdout + run.stderr  # on a redis-server of its own
    assert _app_key_left(app_redis)


def test_the_suite_refuses_a_test_database_that_holds_a_key_it_did_not_create(
    app_redis: str,
) -> None:
    run = _run_suite(f"{FLUSHING_TEST}[redis]", **{ENV_URL: app_redis})
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 error" in run.stdout and "ForeignKeysError" in run.stdout
    assert APP_KEY in run.stdout and ENV_URL in run.stdout  # says which key, and what to do
    assert _app_key_left(app_redis)


def test_an_empty_test_database_is_taken_flushed_and_left_empty(
    claimed: tuple[SuiteDatabase, redis.Redis],
) -> None:
    database, client = claimed
    database.flush()
    assert client.dbsize() == 0
    client.set(QUEUE_KEY, 2)
    database.release()
    assert client.dbsize() == 0


def test_a_key_that_appears_during_the_session_stops_the_next_flush(
    claimed: tuple[SuiteDatabase, redis.Redis],
) -> None:
    database, client = claimed
    client.set(APP_KEY, b"somebody's data")
    with pytest.raises(ForeignKeysError, match=APP_KEY):
        database.flush()
    assert client.get(QUEUE_KEY) == b"1" and client.get(APP_KEY) == b"somebody's data"


def test_leftover_queue_keys_are_not_taken_for_the_suite_s_own(own_redis: str) -> None:
    # redisq keys in a database the suite has not emptied belong to some application's queues
    with redis.Redis.from_url(own_redis) as client:
        client.set(QUEUE_KEY, 7)
        with pytest.raises(ForeignKeysError, match=r"1 key\(s\) .*redisq:\{q\}:seq"):
            SuiteDatabase(own_redis).claim()
        assert client.get(QUEUE_KEY) == b"7"


@pytest.mark.parametrize(
    ("banner", "product", "version"),
    [
        ("Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64", "Redis", (7, 0, 15)),
        ("Valkey server v=8.1.8 sha=00000000:1 malloc=libc bits=64", "Valkey", (8, 1, 8)),
        ("Redis server v=6.2.14 sha=40305114:0 malloc=libc bits=64", "Redis", (6, 2, 14)),
    ],
)
def test_the_server_version_is_read_from_its_banner(
    banner: str, product: str, version: tuple[int, int, int]
) -> None:
    found = parse_version_banner(banner + "\n", "/bin/x", "test")
    assert (found.product, found.version) == (product, version)


def test_a_server_too_old_for_redisq_is_refused_naming_the_version_needed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = tmp_path / "redis-server"
    old.write_text("#!/bin/sh\necho 'Redis server v=4.0.14 sha=00000000:0 malloc=libc bits=64'\n")
    old.chmod(0o755)
    monkeypatch.setenv(ENV_SERVER, str(old))
    with pytest.raises(RedisServerError, match=r"Redis 4\.0\.14 .* need Redis 5\.0 or newer"):
        find_redis_server()


def test_an_unknown_server_choice_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_SERVER, "/nonexistent/redis-server")
    with pytest.raises(RedisServerError, match="neither 'embedded', 'path' nor an executable"):
        find_redis_server()
