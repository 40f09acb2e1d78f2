"""The Redis database the tests (and benchmarks) flush, guarded so that it is never someone else's.

The tests flush their database before every Redis test. On a redis-server started here that
harms nobody; a database named by ``VARMQ_TEST_REDIS_URL`` may hold someone's data, so
:class:`SuiteDatabase` takes a database only if it is empty (:meth:`~SuiteDatabase.claim`),
flushes it only while every key in it is one the suite makes (:meth:`~SuiteDatabase.flush`: keys
with one of ``prefixes``, ``redisq:`` for the tests), and leaves it empty at the end
(:meth:`~SuiteDatabase.release`), so that the next run takes it again. Anything else raises
:class:`ForeignKeysError`, naming some of the keys, before a single key is touched.
"""

from __future__ import annotations

import itertools

import redis

from tests.support.redis_server import ENV_URL, RedisServerError

__all__ = ["ForeignKeysError", "SuiteDatabase"]

_SHOWN = 5
"""How many foreign key names an error shows."""


class ForeignKeysError(RedisServerError):
    """The database holds keys the suite did not create; the suite leaves it alone."""


class SuiteDatabase:
    """A database the suite may flush: found empty, and since then holding only its own keys."""

    def __init__(self, url: str, *, prefixes: tuple[str, ...] = ("redisq:",)) -> None:
        self.url = url
        self.prefixes = tuple(prefix.encode() for prefix in prefixes)

    def claim(self) -> None:
        """Take the database for the suite; :class:`ForeignKeysError` unless it is empty."""
        with redis.Redis.from_url(self.url) as client:
            count = int(client.dbsize())
            if count == 0:
                return
            sample = list(itertools.islice(client.scan_iter(count=100), _SHOWN))
        shown = ", ".join(_names(sample))
        raise ForeignKeysError(
            f"{self.url} holds {count} key(s) the tests did not create ({shown}); they flush the "
            f"database they use, so they take only an empty one. Point {ENV_URL} at an empty "
            "database of its own (or unset it to let the tests start their own redis-server); "
            "if these keys are left over from a test run that was killed, flush that database "
            "yourself."
        )

    def flush(self) -> None:
        """FLUSHDB, unless a key the suite does not make is there (then raise, flush nothing)."""
        with redis.Redis.from_url(self.url) as client:
            foreign: list[bytes] = []
            for key in client.scan_iter(count=1000):
                if not key.startswith(self.prefixes):
                    foreign.append(key)
                    if len(foreign) == _SHOWN:
                        break
            if foreign:
                raise ForeignKeysError(
                    f"{self.url} now holds keys the tests did not create "
                    f"({', '.join(_names(foreign))}): something else writes to this database, "
                    "so the tests will not flush it."
                )
            client.flushdb()

    def release(self) -> None:
        """Leave the database empty, as :meth:`claim` found it (same check as :meth:`flush`)."""
        self.flush()


def _names(keys: list[bytes]) -> list[str]:
    return [key.decode(errors="backslashreplace") for key in keys]
