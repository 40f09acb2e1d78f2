"""The doorbell: a commit that added jobs wakes the watchers of other processes at once.

The watcher thread (:mod:`sqliteq._watch`) learns of commits by polling ``PRAGMA
data_version`` every ``POLL_INTERVAL`` seconds, so a job added by another process waited half
an interval on average before anyone looked. The doorbell cuts that wait: every watching
process binds a Unix datagram socket in a directory beside the database file,
``<db>.bell/<pid>-<random>.sock``, and waits on it with the poll interval as timeout. After a
transaction that made jobs takeable (an add, a release, a requeue, a topic publish) has
committed, its process sends one byte to every socket in that directory. Ringing before the
commit would be useless: the woken watcher would find nothing and sleep a whole interval.

A watcher that follows job record ends (a ``result_of`` wait in its process) binds its socket
as ``<pid>-<random>.ends.sock`` instead: a commit that ended records (an acknowledgement, a
failure, a dead letter or a cancel of a queue with ``keep_results``) rings those sockets only,
so a waiting process hears of the end at once, and the other watchers are not woken by every
acknowledgement. Older releases ring every ``.sock`` on adds and poll for ends, as before.

The bell is only a hint. The poll stays as the safety net, so a lost ring costs what it cost
without the bell (one interval) and never a job:

- Sending is non-blocking and best-effort. A full socket buffer (the watcher has rings it has
  not read: it will look anyway) is ignored; a socket whose process died (``ECONNREFUSED``) is
  dropped from the list and its file removed once it is old enough not to be a socket being
  bound right now; a socket removed since (``ENOENT``) or not ours to write (``EACCES``) is
  dropped. Nothing raises into the commit.
- A ringer lists the directory at most every ``RELIST_INTERVAL`` seconds (it stats it then,
  and reads it only when its mtime changed or is recent), so a process that does not find a
  bell directory pays no system call per commit, and one that does pays one ``sendto`` per
  watching process. A watcher that starts is rung from the ringers' next look on.
- Where the bell cannot be set up (no ``AF_UNIX`` datagram sockets, as on Windows; a directory
  the process may not create entries in; a path too long for a socket address where
  ``/proc/self/fd`` cannot shorten it) the watcher polls only, which is logged once per file
  at INFO level.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import select
import socket
import stat
import threading
import time

__all__ = ["BELL_SUFFIX", "ENDS_SUFFIX", "RELIST_INTERVAL", "Listener", "Ringer", "bell_directory"]

logger = logging.getLogger("sqliteq")

BELL_SUFFIX = ".bell"
"""The bell directory of a database file is the file's path with this suffix."""

RELIST_INTERVAL = 0.5
"""Seconds between two looks of a ringer at the bell directory."""

SOCKET_SUFFIX = ".sock"
ENDS_SUFFIX = ".ends" + SOCKET_SUFFIX
"""How the socket name of a watcher that follows record ends ends: commits that ended records
ring such sockets, and only those (other watchers are not woken by every acknowledgement)."""
# A socket that refuses rings is removed only if it is older than this (seconds): younger, it
# may be one that another process is binding right now (the file exists a moment before the
# socket answers).
STALE_AGE = 10.0
# The longest socket path bound or addressed as is (sun_path is 104 bytes on macOS, 108 on
# Linux, terminating zero included); longer ones go through /proc/self/fd on Linux.
_MAX_ADDRESS = 100
_PROC_FD = "/proc/self/fd"
_RING = b"\x01"

# True where a watcher can wait on a Unix datagram socket (not on Windows).
SUPPORTED = os.name == "posix" and hasattr(socket, "AF_UNIX") and hasattr(select, "poll")

_fallbacks_logged: set[str] = set()
_fallbacks_lock = threading.Lock()


def bell_directory(path: str) -> str:
    """The bell directory beside the database file ``path``."""
    return path + BELL_SUFFIX


def _log_fallback(path: str, reason: str) -> None:
    """Say once per file that its watchers poll only."""
    with _fallbacks_lock:
        if path in _fallbacks_logged:
            return
        _fallbacks_logged.add(path)
    logger.info(
        "sqliteq: %s: no doorbell (%s); other processes' jobs are noticed by polling only",
        path,
        reason,
    )


def _address(directory: str, name: str, dir_fd: int | None) -> str:
    """The socket address of ``directory/name``: short enough for ``sun_path``."""
    full = os.path.join(directory, name)
    if len(os.fsencode(full)) <= _MAX_ADDRESS or dir_fd is None:
        return full
    return f"{_PROC_FD}/{dir_fd}/{name}"


def _needs_dir_fd(directory: str) -> bool:
    """Whether socket addresses in ``directory`` are too long to give as they are."""
    return len(os.fsencode(directory)) + 1 + 32 > _MAX_ADDRESS and os.path.isdir(_PROC_FD)


class Listener:
    """A watcher's socket in the bell directory: ``wait`` returns on a ring or a timeout."""

    def __init__(self, sock: socket.socket, path: str) -> None:
        self._sock = sock
        self.path = path  # the socket file, removed by close()
        self.ends = path.endswith(ENDS_SUFFIX)  # rung by record ends too
        self._inode = os.stat(path).st_ino
        # close() interrupts a wait through this pair (no need for the bell directory).
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._poll = select.poll()
        self._poll.register(sock.fileno(), select.POLLIN)
        self._poll.register(self._wake_r.fileno(), select.POLLIN)
        self._closed = False

    @classmethod
    def open(cls, db_path: str, *, ends: bool = False) -> Listener | None:
        """Bind a new socket in ``db_path``'s bell directory; ``None`` (logged once) where
        the bell cannot be set up. ``ends``: rung by commits that ended job records too."""
        if not SUPPORTED:
            _log_fallback(db_path, "this platform has no Unix datagram sockets")
            return None
        directory = bell_directory(db_path)
        name = f"{os.getpid()}-{secrets.token_hex(6)}{ENDS_SUFFIX if ends else SOCKET_SUFFIX}"
        dir_fd: int | None = None
        sock: socket.socket | None = None
        bound: str | None = None  # the socket file made, removed again if setting up fails
        try:
            db_mode = stat.S_IMODE(os.stat(db_path).st_mode) & 0o666
            try:
                os.mkdir(directory)
                # Whoever may write the database may watch it: search where it may read.
                os.chmod(directory, 0o700 | db_mode | (db_mode & 0o444) >> 2)
            except FileExistsError:
                pass
            if _needs_dir_fd(directory):
                dir_fd = os.open(directory, os.O_RDONLY)
            address = _address(directory, name, dir_fd)
            if len(os.fsencode(address)) > _MAX_ADDRESS:
                _log_fallback(db_path, f"the path {directory} is too long for a socket address")
                return None
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.setblocking(False)
            sock.bind(address)
            bound = os.path.join(directory, name)
            # Whoever may write the database may ring (connecting needs write permission on
            # the socket file); the umask alone would often shut out other users.
            os.chmod(bound, db_mode)
            listener = cls(sock, bound)
            sock = bound = None
            return listener
        except OSError as exc:
            _log_fallback(db_path, f"cannot make a socket in {directory}: {exc.strerror or exc}")
            return None
        finally:
            if sock is not None:
                sock.close()
            if bound is not None:
                with contextlib.suppress(OSError):
                    os.unlink(bound)
            if dir_fd is not None:
                os.close(dir_fd)

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a ring; read every ring pending (one look
        answers them all). Whether the bell rang."""
        if self._closed:
            return False
        events = self._poll.poll(max(0, int(timeout * 1000)))
        rang = False
        for fd, _ in events:
            if fd == self._sock.fileno():
                rang = self._drain(self._sock) or rang
            else:
                self._drain(self._wake_r)
        return rang

    @staticmethod
    def _drain(sock: socket.socket) -> bool:
        got = False
        while True:
            try:
                sock.recv(64)
            except OSError:  # BlockingIOError: nothing more pending
                return got
            got = True

    def interrupt(self) -> None:
        """Make a ``wait`` in another thread return now."""
        # OSError: a wake-up is already pending, or the listener is closed.
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\x00")

    def registered(self) -> bool:
        """Whether the socket file is still there (another process may have removed it)."""
        try:
            return os.stat(self.path).st_ino == self._inode
        except OSError:
            return False

    def close(self) -> None:
        """Remove the socket file and close the sockets (only from the waiting thread)."""
        if self._closed:
            return
        self._closed = True
        if self.registered():
            with contextlib.suppress(OSError):  # removed meanwhile: nothing to undo
                os.unlink(self.path)
        for sock in (self._sock, self._wake_r, self._wake_w):
            sock.close()


class Ringer:
    """Rings the watchers of one database file; :meth:`ring` after each commit that added jobs."""

    def __init__(self, db_path: str) -> None:
        self._db_path = db_path
        self._dir = bell_directory(db_path)
        # Protects everything below: ring() may be called from any thread.
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None  # unbound, non-blocking; made on first target
        self._dir_fd: int | None = None  # the directory, for /proc/self/fd addresses
        self._targets: dict[str, str] = {}  # socket file name -> address
        self._mtime_ns: int | None = None  # the directory's mtime at the last listing
        self._next_look = 0.0  # time.monotonic() of the next look at the directory
        self._closed = False

    def ring(self, *, ends_only: bool = False) -> None:
        """Send one ring to every watcher listed (``ends_only``: to those that follow record
        ends); never raises, never blocks."""
        with self._lock:
            if self._closed:
                return
            now = time.monotonic()
            if now >= self._next_look:
                self._next_look = now + RELIST_INTERVAL
                self._look()
            if not self._targets or self._sock is None:
                return
            for name, address in list(self._targets.items()):
                if ends_only and not name.endswith(ENDS_SUFFIX):
                    continue
                try:
                    self._sock.sendto(_RING, address)
                except (BlockingIOError, InterruptedError):
                    pass  # rings are pending there: the watcher will look anyway
                except OSError as exc:
                    self._drop(name, exc)

    def close(self) -> None:
        """Close the sending socket; later rings do nothing."""
        with self._lock:
            self._closed = True
            self._targets = {}
            if self._sock is not None:
                self._sock.close()
                self._sock = None
            self._close_dir_fd()

    def _look(self) -> None:
        """List the directory again if it changed (or changed recently) since the last look."""
        try:
            st = os.stat(self._dir)
        except OSError:
            self._targets = {}
            self._mtime_ns = None
            self._close_dir_fd()
            return
        # The mtime may be coarser than the time between two entries: read a recent change
        # again on the next look, so a socket bound within the same tick is not missed.
        recent = time.time_ns() - st.st_mtime_ns < 2 * RELIST_INTERVAL * 1e9
        if st.st_mtime_ns == self._mtime_ns and not recent:
            return
        self._mtime_ns = st.st_mtime_ns
        try:
            self._list()
        except OSError as exc:
            logger.debug("sqliteq: cannot list %s: %s", self._dir, exc)
            self._targets = {}

    def _list(self) -> None:
        self._close_dir_fd()
        if _needs_dir_fd(self._dir):
            self._dir_fd = os.open(self._dir, os.O_RDONLY)
        targets: dict[str, str] = {}
        with os.scandir(self._dir) as entries:
            for entry in entries:
                # Only sockets, never through a link: a link could aim the rings elsewhere.
                if not entry.name.endswith(SOCKET_SUFFIX) or entry.is_symlink():
                    continue
                if not stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode):
                    continue
                address = _address(self._dir, entry.name, self._dir_fd)
                if len(os.fsencode(address)) <= _MAX_ADDRESS:
                    targets[entry.name] = address
        self._targets = targets
        if targets and self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.setblocking(False)
            self._sock = sock

    def _drop(self, name: str, exc: OSError) -> None:
        """Stop ringing ``name``; remove its file if its process is gone."""
        self._targets.pop(name, None)
        if exc.errno != errno.ECONNREFUSED:
            if exc.errno not in (errno.ENOENT, errno.EACCES, errno.EPERM):
                logger.debug("sqliteq: ringing %s/%s failed: %s", self._dir, name, exc)
            return
        # Nobody reads this socket: its process ended without removing it (killed). Remove it
        # unless it is young (it may be being bound; it is listed again on a later look).
        path = os.path.join(self._dir, name)
        try:
            st = os.lstat(path)
            if stat.S_ISSOCK(st.st_mode) and time.time() - st.st_mtime > STALE_AGE:
                os.unlink(path)
        except OSError:
            pass  # removed by someone else, or not ours to remove: it stays unrung

    def _close_dir_fd(self) -> None:
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None
