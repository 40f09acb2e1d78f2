"""Deciding whether a file is ours, then opening it: the only place that may refuse a file.

A file is opened for writing only after it passed every check on a read-only look: it is
missing or empty, or it is a SQLite database marked with our ``application_id`` (or a SQLite
database with nothing in it), at a schema version we know, that passes ``PRAGMA
quick_check``. Without ``create``, a missing file raises ``FileNotFoundError`` and an empty one
(or a SQLite database without tables) :class:`~sqliteq.errors.NotADatabaseError`: nothing is
set up. Anything else raises a :class:`~sqliteq.errors.RefusedDatabaseError` and the
file is left byte for byte as it was: setting WAL mode, the schema version or the application
id are all writes, so they come after the checks.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import time
from pathlib import Path

from . import _schema, _sql
from ._clock import WALL, Clock
from .errors import (
    CorruptDatabaseError,
    ForeignDatabaseError,
    NotADatabaseError,
    RefusedDatabaseError,
    SchemaVersionError,
    StorageUnavailableError,
)

__all__ = ["connect", "is_busy", "open_database", "open_read_only", "read_only_query"]

_MAGIC = b"SQLite format 3\x00"
_HEADER_SIZE = 100
_OUR_TABLES = frozenset({"jobs", "queues"})
# SQLite primary result codes (the sqlite3 module names them only from Python 3.11 on).
_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26
_CREATE_HINT = " (open it with create=True to set it up as one)"
# Files up to this size get PRAGMA integrity_check (which also checks that every index matches
# its table); larger ones the faster quick_check. Both read every page.
INTEGRITY_CHECK_MAX_BYTES = 64 * 1024 * 1024

logger = logging.getLogger("sqliteq")


def open_database(
    path: str,
    *,
    synchronous: str,
    busy_timeout: float,
    create: bool,
    lease_clock: tuple[str, Clock, Clock] | None = None,
) -> sqlite3.Connection:
    """Check ``path``, then return a read-write connection with the schema up to date.

    ``create``: a missing or blank file may be set up as a new database. ``lease_clock``:
    ``(identity, lease clock, wall clock)`` of this process; the file's leases are moved onto
    it if they are on another (``None``: leave them, a test clock).
    """
    _check_file(path, create)
    conn = connect(path, busy_timeout=busy_timeout)
    try:
        mode = _set_wal(conn, busy_timeout)
        if str(mode).lower() != "wal":
            raise RefusedDatabaseError(path, f"cannot be switched to WAL mode (got {mode!r})")
        conn.execute(_sql.SET_SYNCHRONOUS.format(level=synchronous))
        conn.execute(_sql.SET_TEMP_STORE_MEMORY)
        _migrate(conn, path, create, lease_clock)
    except sqlite3.OperationalError as exc:
        conn.close()
        if is_busy(exc):  # another process holds the write lock: busy, not a bad file
            raise StorageUnavailableError(
                path,
                "open",
                f"another connection held the write lock for all of busy_timeout "
                f"({busy_timeout:g} s); try again later ({exc})",
            ) from exc
        raise RefusedDatabaseError(path, f"cannot be prepared ({exc})") from exc
    except sqlite3.Error as exc:
        conn.close()
        raise RefusedDatabaseError(path, f"cannot be prepared ({exc})") from exc
    except BaseException:
        conn.close()
        raise
    return conn


def is_busy(exc: sqlite3.OperationalError) -> bool:
    """Whether ``exc`` says another connection holds a lock (SQLITE_BUSY, SQLITE_LOCKED)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED and their extended codes
    return "locked" in str(exc) or "busy" in str(exc)


def open_read_only(path: str, *, busy_timeout: float, uri_query: str) -> sqlite3.Connection:
    """Check ``path``, then return a connection that reads it and writes nothing, ever.

    Nothing is created or changed: no ``-wal``/``-shm`` files, no schema upgrade (a file at
    another schema version raises :class:`~sqliteq.errors.SchemaVersionError` naming both
    versions). A missing file raises ``FileNotFoundError``. ``uri_query``: from
    :func:`read_only_query`.
    """
    _check_file(path, create=False, read_only=True)
    conn = connect(path, busy_timeout=busy_timeout, uri_query=uri_query)
    try:
        conn.execute(_sql.SET_QUERY_ONLY)
        conn.execute(_sql.SET_TEMP_STORE_MEMORY)
    except sqlite3.Error as exc:
        conn.close()
        raise RefusedDatabaseError(path, f"cannot be opened ({exc})") from exc
    return conn


def read_only_query(path: str) -> str:
    """The URI parameters that read ``path`` without creating a file beside it.

    SQLite makes ``-wal`` and ``-shm`` files for any reader of a WAL database, even with
    ``mode=ro``, unless they exist. When they do, a writer has the file open (or left them):
    read through them. When they do not, nobody is writing: read the main file as immutable.
    """
    if Path(path + "-wal").exists() and Path(path + "-shm").exists():
        return "mode=ro"
    return "mode=ro&immutable=1"


def _set_wal(conn: sqlite3.Connection, busy_timeout: float) -> object:
    """Switch to WAL, waiting out other processes that set the same file up right now.

    Changing the journal mode of a new file needs it to itself, and SQLite answers "database
    is locked" at once instead of calling the busy handler; so wait here, up to busy_timeout.
    """
    deadline = time.monotonic() + busy_timeout
    pause = 0.005
    while True:
        try:
            return conn.execute(_sql.SET_JOURNAL_WAL).fetchone()[0]
        except sqlite3.OperationalError as exc:
            text = str(exc)
            if ("locked" not in text and "busy" not in text) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def connect(path: str, *, busy_timeout: float, uri_query: str = "") -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), usable from any thread."""
    target = path
    if uri_query:
        target = Path(path).absolute().as_uri() + "?" + uri_query
    try:
        return sqlite3.connect(
            target,
            timeout=busy_timeout,
            isolation_level=None,
            check_same_thread=False,
            uri=bool(uri_query),
        )
    except sqlite3.Error as exc:
        raise RefusedDatabaseError(path, f"cannot be opened ({exc})") from exc


# How many times the file is looked at again when it changed while it was looked at (another
# process creating or checkpointing it), and the pause between two looks.
_LOOKS = 5
_RELOOK_SECONDS = 0.01


class _ChangedWhileLooked(Exception):
    """The file's size or header disagreed, and the file changed meanwhile: a writer at work."""


def _check_file(path: str, create: bool, read_only: bool = False) -> None:
    """Raise unless ``path`` is a healthy database of ours, or missing or empty and ``create``.

    The size and header checks refuse a copy at rest that was cut or extended. A file that
    another process creates or checkpoints right now can disagree with its own header for a
    moment (its size read before the header page was written), so a disagreement is trusted
    only if the file did not change while it was looked at; a file that keeps changing is
    being written, not a damaged copy, and SQLite's own look (``quick_check``) decides.
    """
    for _ in range(_LOOKS - 1):
        try:
            _look(path, create, read_only, last=False)
            return
        except _ChangedWhileLooked:
            time.sleep(_RELOOK_SECONDS)
    _look(path, create, read_only, last=True)


def _look(path: str, create: bool, read_only: bool, *, last: bool) -> None:
    """One look of :func:`_check_file`. A size or header that disagree refuse the file if it
    did not change meanwhile; if it did, the look raises :class:`_ChangedWhileLooked`, or, the
    ``last`` time, leaves the decision to SQLite's own look."""
    wal = Path(path + "-wal")
    try:
        seen = os.stat(path)
        size = seen.st_size
    except FileNotFoundError:
        if create:
            return
        raise FileNotFoundError(
            errno.ENOENT, "sqliteq: no such database file (create=True makes one)", path
        ) from None
    except OSError as exc:
        raise RefusedDatabaseError(path, f"cannot be read ({exc.strerror})") from exc
    if not Path(path).is_file():
        raise NotADatabaseError(path, "is not a regular file")
    if size == 0 and not wal.exists():
        if create:
            return  # a new database: nothing to protect
        raise NotADatabaseError(path, f"is an empty file, not a sqliteq database{_CREATE_HINT}")
    if size:
        try:
            with open(path, "rb") as fh:
                header = fh.read(_HEADER_SIZE)
        except OSError as exc:
            raise RefusedDatabaseError(path, f"cannot be read ({exc.strerror})") from exc
        try:
            if len(header) < _HEADER_SIZE or not header.startswith(_MAGIC):
                raise NotADatabaseError(path, "is not a SQLite database (no SQLite header)")
            _check_size(path, header, size, wal_bytes=_size_or_zero(wal))
        except RefusedDatabaseError:
            if not _changed(path, seen):
                raise  # at rest: a cut or extended copy
            if not last:
                raise _ChangedWhileLooked from None
            # Still being written after every look: SQLite's own look below decides.
    if wal.exists():
        # Someone may have it open: read through the WAL like any reader (no new files made).
        _inspect(path, "mode=ro", create, read_only)
        return
    # No WAL file: the main file is the whole database. immutable=1 reads it without creating
    # -wal/-shm files beside a file we may end up refusing.
    try:
        _inspect(path, "immutable=1", create, read_only)
    except RefusedDatabaseError:
        if not (wal.exists() or Path(path + "-shm").exists()):
            raise
        # Another process opened and wrote it while we looked (an immutable look takes no
        # lock, so it can see a checkpoint half done); look again the normal way.
        _inspect(path, "mode=ro", create, read_only)


def _inspect(path: str, uri_query: str, create: bool, read_only: bool = False) -> None:
    conn = connect(path, busy_timeout=1.0, uri_query=uri_query)
    try:
        # One read transaction: the header and the table list from the same snapshot.
        conn.execute(_sql.BEGIN_READ)
        app_id = conn.execute(_sql.READ_APPLICATION_ID).fetchone()[0]
        version = conn.execute(_sql.READ_USER_VERSION).fetchone()[0]
        tables = {row[0] for row in conn.execute(_sql.TABLE_NAMES)}
        _check_identity(path, app_id, version, tables, create)
        if read_only and version != _schema.SCHEMA_VERSION:
            raise SchemaVersionError(
                path,
                f"has sqliteq schema version {version}, older than this sqliteq's "
                f"({_schema.SCHEMA_VERSION}); it was not upgraded, since it was opened read-only "
                f"(open it once read-write, with sqliteq.new, to upgrade it)",
            )
        size = os.stat(path).st_size
        check = _sql.INTEGRITY_CHECK if size <= INTEGRITY_CHECK_MAX_BYTES else _sql.QUICK_CHECK
        problems = [row[0] for row in conn.execute(check).fetchmany(3)]
        conn.execute(_sql.COMMIT)
    except sqlite3.DatabaseError as exc:
        raise _classify(path, exc) from exc
    finally:
        conn.close()
    if problems != ["ok"]:
        detail = "; ".join(str(p) for p in problems)
        raise CorruptDatabaseError(path, f"is damaged (integrity check: {detail})")


def _changed(path: str, seen: os.stat_result) -> bool:
    """Whether the file at ``path`` is no longer as ``seen`` (size, modification time)."""
    try:
        now = os.stat(path)
    except OSError:
        return True
    return (now.st_size, now.st_mtime_ns) != (seen.st_size, seen.st_mtime_ns)


def _size_or_zero(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _check_size(path: str, header: bytes, size: int, *, wal_bytes: int) -> None:
    """Raise if the file's size disagrees with its header: a truncated or extended copy.

    The page size is bytes 16-17 of the header (1 means 65536); bytes 28-31 count the pages
    when bytes 24-27 equal bytes 92-95 (the count is valid). With a non-empty WAL the main
    file may lag behind its pages, so only a size that is not whole pages is refused then.
    """
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        raise CorruptDatabaseError(path, f"is damaged (header page size {page_size})")
    if size % page_size:
        raise CorruptDatabaseError(
            path,
            f"is damaged: truncated or extended ({size} bytes is not a whole number of "
            f"{page_size}-byte pages)",
        )
    pages = int.from_bytes(header[28:32], "big")
    valid = header[24:28] == header[92:96] and pages > 0
    if valid and not wal_bytes and size != pages * page_size:
        raise CorruptDatabaseError(
            path,
            f"is damaged: truncated or extended ({size} bytes; its header says {pages} pages "
            f"of {page_size} bytes)",
        )


def _check_identity(path: str, app_id: int, version: int, tables: set[str], create: bool) -> None:
    """Raise unless the header and tables say: ours at a known version, or an empty database
    (when ``create``)."""
    if app_id == _schema.APPLICATION_ID:
        if version > _schema.SCHEMA_VERSION:
            raise SchemaVersionError(
                path,
                f"has sqliteq schema version {version}, newer than this sqliteq knows "
                f"({_schema.SCHEMA_VERSION}); upgrade sqliteq",
            )
        if version >= 1 and not tables >= _OUR_TABLES:
            missing = ", ".join(sorted(_OUR_TABLES - tables))
            raise CorruptDatabaseError(
                path, f"is marked as a sqliteq database but lacks its tables ({missing})"
            )
        return
    if app_id != 0:
        raise ForeignDatabaseError(
            path, f"belongs to another application (application_id {app_id:#x})"
        )
    user_tables = sorted(t for t in tables if not t.startswith("sqlite_"))
    if user_tables or version != 0:
        shown = ", ".join(user_tables[:5]) or "none"
        raise ForeignDatabaseError(
            path,
            f"is a SQLite database of another application (tables: {shown}; "
            f"no sqliteq application_id)",
        )
    if not create:
        raise NotADatabaseError(
            path, f"is a SQLite database without tables, not a sqliteq database{_CREATE_HINT}"
        )


def _classify(path: str, exc: sqlite3.DatabaseError) -> RefusedDatabaseError:
    code = getattr(exc, "sqlite_errorcode", None)
    text = str(exc)
    if code == _SQLITE_NOTADB or "not a database" in text:
        return NotADatabaseError(path, f"is not a SQLite database ({text})")
    if code == _SQLITE_CORRUPT or "malformed" in text:
        return CorruptDatabaseError(path, f"is damaged ({text})")
    return RefusedDatabaseError(path, f"cannot be read ({text})")


def _migrate(
    conn: sqlite3.Connection,
    path: str,
    create: bool,
    lease_clock: tuple[str, Clock, Clock] | None = None,
) -> None:
    """Bring the schema to SCHEMA_VERSION in one write transaction (a no-op when current)."""
    conn.execute(_sql.BEGIN_IMMEDIATE)
    try:
        # Read again under the write lock: another process may have set the file up meanwhile.
        app_id = conn.execute(_sql.READ_APPLICATION_ID).fetchone()[0]
        version = conn.execute(_sql.READ_USER_VERSION).fetchone()[0]
        tables = {row[0] for row in conn.execute(_sql.TABLE_NAMES)}
        _check_identity(path, app_id, version, tables, create)
        had_capacity = conn.execute(_schema.CAPACITY_INSTALLED).fetchone() is not None
        for statements in _schema.MIGRATIONS[version:]:
            for statement in statements:
                conn.execute(statement)
        _rewrite_checks(conn, path)
        if had_capacity and conn.execute(_schema.CAPACITY_INSTALLED).fetchone() is None:
            # Rebuilding the jobs table (version 3) dropped its triggers: install them again,
            # which also recounts queues.ready.
            for statement in _schema.INSTALL_CAPACITY:
                conn.execute(statement)
        if version < _schema.SCHEMA_VERSION:
            conn.execute(_sql.SET_APPLICATION_ID.format(value=_schema.APPLICATION_ID))
            conn.execute(_sql.SET_USER_VERSION.format(value=_schema.SCHEMA_VERSION))
        if lease_clock is not None:
            _adopt_lease_clock(conn, *lease_clock)
        conn.execute(_sql.COMMIT)
    except BaseException:
        if conn.in_transaction:
            conn.execute(_sql.ROLLBACK)
        raise


def _rewrite_checks(conn: sqlite3.Connection, path: str) -> None:
    """Replace the costly CHECK constraints of _schema.CHECK_REWRITES by their equivalents, inside
    the open's write transaction; once per file (a no-op afterwards).

    Where SQLite refuses to change its schema table (a build in defensive mode), the file keeps
    the constraints as written, which only costs time, and one INFO line says so."""
    changes = []
    for table, written, equivalent in _schema.CHECK_REWRITES:
        row = conn.execute(_schema.TABLE_SQL, {"name": table}).fetchone()
        if row is not None and written in row[0]:
            changes.append({"name": table, "sql": row[0].replace(written, equivalent)})
    if not changes:
        return
    version = int(conn.execute(_schema.READ_SCHEMA_VERSION).fetchone()[0])
    conn.execute(_schema.SAVEPOINT_CHECKS)
    conn.execute(_schema.SET_WRITABLE_SCHEMA.format(value="ON"))
    try:
        conn.executemany(_schema.REWRITE_TABLE_SQL, changes)
        conn.execute(_schema.SET_SCHEMA_VERSION.format(value=version + 1))
    except sqlite3.DatabaseError as exc:
        conn.execute(_schema.ROLLBACK_CHECKS)  # a rewrite that went through is taken back too
        logger.info(
            "%s keeps its CHECK constraints as written (SQLite refused to rewrite "
            "them: %s); every job write checks its state more slowly",
            path,
            exc,
        )
    finally:
        conn.execute(_schema.SET_WRITABLE_SCHEMA.format(value="OFF"))
        conn.execute(_schema.RELEASE_CHECKS)


def _adopt_lease_clock(
    conn: sqlite3.Connection, identity: str, lease_clock: Clock, wall_clock: Clock
) -> None:
    """Put the file's leases on this host's lease clock, inside the open's transaction.

    Wall-clock leases (files before version 4, or written where there is no boot id) keep the
    time they had left; leases on another clock or from another boot have run out.
    """
    stored = str(conn.execute(_sql.READ_LEASE_CLOCK).fetchone()[0])
    if stored == identity:
        return
    times = {"now": wall_clock(), "lease_now": lease_clock()}
    if stored == WALL:
        conn.execute(_sql.CONVERT_WALL_LEASES, times)
    else:
        conn.execute(_sql.EXPIRE_FOREIGN_LEASES, times)
    conn.execute(_sql.SET_LEASE_CLOCK, {"identity": identity})
