"""Snapshots: in-memory queues saved to one JSON file, and loaded back after a restart.

:func:`save_queues` copies each queue under its worker's locks (:func:`_cut`), checks that the
loader would accept what it is about to write, and replaces the file atomically
(:func:`_write_atomically`), through a symlink its target. :func:`load_queues` refuses anything
but a whole file of this format and builds in-memory queues (:mod:`varmq.sources.memory_queues`)
that bring their delayed jobs and dead letters to the worker they are bound to. Both remove the
temporary files that saves killed mid-write left beside the file
(:func:`_remove_stale_temporaries`). What the file holds is in :mod:`varmq.api.snapshot_format`.
The only module of the core that touches files. JSON only: loading never runs or imports code.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..model.errors import PersistenceError
from ..model.jobs import EnqueuedJob, JobStatus, as_handle
from ..sources.memory_queues import MemoryPriorityQueue, MemoryQueue
from . import snapshot_format
from .queues import PriorityQueue, Queue
from .snapshot_format import Cut, Refusal

if TYPE_CHECKING:
    from ..sources.memory import MemorySource

__all__ = ["PersistenceError", "load_queues", "save_queues"]

log = logging.getLogger("varmq.snapshots")

_Handle = Queue[Any, Any, Any] | PriorityQueue[Any, Any, Any]

STALE_AFTER = 3600.0
"""Seconds after which a save's temporary file counts as left by a crash even though a process
with its writer's pid runs: that pid was reused (a save writes its file in well under that)."""

# Guards _WRITING, the temporary files that saves of this process are writing now: a save or
# load in another thread must keep them, though their writer's pid (this one's) is alive.
_WRITING_LOCK = threading.Lock()
_WRITING: set[str] = set()


def save_queues(handles: Iterable[_Handle], path: str | os.PathLike[str]) -> None:
    """Save in-memory queues to one JSON file at ``path``, replacing it atomically.

    ``handles`` are queue handles from ``bind_queue``, ``bind_priority_queue``, ``with_queue``
    or ``with_priority_queue``, of one worker or several, running or not; each queue is saved
    under its bound name (``name=``, else its storage's ``name``). The file holds, per queue,
    its kind, its retry policy and the worker's ``poison_limit``, its waiting jobs in the
    order they would be taken, its delayed jobs with their due times and its dead letters.
    Jobs taken and not finished yet are saved as waiting, at the front of the line (of their
    priority, in a priority queue); jobs cancelled or finished are left out.

    The new file is written next to the old one, flushed to disk and moved over it, so a
    crash at any moment leaves either the old file or the new one. A ``path`` that is a symlink
    stays one: the file it points to is replaced. Temporary files that earlier saves of this
    file left when their process died are removed. Raises
    :class:`PersistenceError`, writing nothing, when the loader would refuse the file: two
    queues with one name, two waiting or delayed jobs of one queue with one (non-empty) id, a
    priority too long to write (more than 4,300 digits), or data that JSON cannot express.
    """
    target = os.fspath(path)
    if isinstance(handles, Queue | PriorityQueue):
        raise TypeError("save_queues takes a list of queue handles, e.g. [queue]")
    handles = list(handles)
    names: set[str] = set()
    for handle in handles:
        if not isinstance(handle, Queue | PriorityQueue):
            raise TypeError(
                "save_queues saves in-memory queue handles (bind_queue, with_queue, ...), got "
                f"{type(handle).__name__}; sqliteq and redisq queues are durable already"
            )
        name = handle._source.label
        if name in names:
            Refusal(target, loading=False)(
                "two queues have this name (give each its own name= when binding it)", name
            )
        names.add(name)
    cuts = [_cut(handle._source, handle._dispatch.lock, target) for handle in handles]
    _write_atomically(target, snapshot_format.encode(cuts, target))


def load_queues(
    path: str | os.PathLike[str], *, missing_ok: bool = False
) -> dict[str, MemoryQueue | MemoryPriorityQueue]:
    """Load the queues saved by :func:`save_queues`, by name, in the order they were saved.

    Bind each to a worker with ``worker.with_queue(q)`` (a ``"fifo"`` queue, a
    :class:`MemoryQueue`) or ``worker.with_priority_queue(q)`` (a :class:`MemoryPriorityQueue`);
    its delayed jobs and dead letters come along, and ``q.retry`` and ``q.poison_limit`` give
    the settings that were saved (pass ``retry=q.retry`` to apply them).

    A missing file raises ``FileNotFoundError``, unless ``missing_ok`` is true: then the
    result is empty. Anything that is not a whole snapshot of this format (empty, truncated,
    not JSON, another program's JSON, another format version, two queues with one name, two
    jobs of one queue with one id) raises :class:`PersistenceError` naming the file; the file
    is never written to. Temporary files that saves of it left when their process died are
    removed, as :func:`save_queues` does.
    """
    source = os.fspath(path)
    _remove_stale_temporaries(os.path.realpath(source))
    try:
        with open(source, "rb") as file:
            raw = file.read()
    except FileNotFoundError:
        if missing_ok:
            return {}
        message = "varmq: no snapshot file (pass missing_ok=True to start without one)"
        raise FileNotFoundError(errno.ENOENT, message, source) from None
    return snapshot_format.decode(raw, source)


def _cut(source: MemorySource, dispatch_lock: Any, target: str) -> Cut:
    """Copy one bound queue: every job in exactly one place, taken jobs at the front.

    Under the dispatcher's lock no job is taken through it, no delayed job is moved into line and no
    dead letter is requeued; :meth:`~varmq.sources.taken.TakenJobs.frozen` keeps the lock-free
    takers off. What still moves meanwhile only enters (adds) or leaves for good (cancelled,
    purged), or is settled, which puts a job in its next place before taking it off the taken
    record: copied in the order taken, delayed, dead, waiting, a job found twice is where it went,
    and the copy holds each job once.

    Each part is copied in one step while what changes it is held off, and only the copies are
    iterated afterwards: the delayed jobs under ``DelayedJobs._lock`` and the dead letters under
    ``DeadLetters._lock`` (the locks that guard them), the taken record by ``frozen`` (one
    C-level copy of its dict: settling threads remove from it without the dispatcher's lock,
    which the GIL makes one atomic step each), the waiting jobs by ``storage.values()`` (a copy
    of the deque, or of each priority line). An add from another thread waits at most for the
    moment of the copy (when it hands its job straight to an idle thread, under the dispatcher's
    lock), never for the encoding or the write.
    """
    with dispatch_lock, source.taken.frozen() as taken:
        delayed = source.delayed.entries()
        dead = source.dead.entries()
        waiting = source.storage.values()
    to_wall = time.time() - time.monotonic()
    placed = {id(job) for _, job in delayed}
    placed.update(id(job) for _, job in dead)
    placed.update(map(id, waiting))
    for item in waiting:
        if as_handle(item) is None:
            Refusal(target, loading=False)(
                f"it holds a {type(item).__name__}, not a job added through its handle",
                source.label,
            )
    closed = JobStatus.CLOSED
    front = [
        job for job in dict.fromkeys(taken) if id(job) not in placed and job._status is not closed
    ]
    front.sort(key=_enqueued_at)
    lined = front + [job for job in waiting if job._status is not closed]
    if front and source.prioritised:
        lined.sort(key=_priority)  # stable: the taken ones stay first in their band
    return Cut(
        name=source.label,
        prioritised=source.prioritised,
        retry=source.retry,
        poison_limit=source.poison_limit,
        jobs=lined,
        delayed=[(due + to_wall, job) for due, job in delayed if job._status is not closed],
        dead=dead,
    )


def _enqueued_at(job: EnqueuedJob[Any]) -> float:
    return job._enqueued_at


def _priority(job: EnqueuedJob[Any]) -> int:
    return job._priority


def _write_atomically(target: str, data: bytes) -> None:
    """Replace ``target`` by ``data`` so that a crash leaves the old file or the new, whole.

    A symlink is followed to the file it names (``os.path.realpath``, through every link):
    that file is replaced and the link stays a link. The new file is written under a fresh name
    in that file's directory (``.NAME.PID.RANDOM.tmp``: the writer's pid and 8 hex digits, left
    behind only by a crash, removed by the next save or load), flushed and fsynced, moved over
    the old one with ``os.replace``, and the directory is fsynced so the move itself is on disk.
    It takes the permission bits of the file it replaces (else the umask's).
    """
    real = os.path.realpath(target)
    directory, name = os.path.split(real)
    _remove_stale_temporaries(real)
    temporary = os.path.join(directory, f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    with _WRITING_LOCK:
        _WRITING.add(temporary)  # before it exists: no cleanup of this process can miss it
    try:
        fd = os.open(temporary, flags, 0o666)
        try:
            with open(fd, "wb", closefd=True) as file:
                if hasattr(os, "fchmod"):
                    with contextlib.suppress(FileNotFoundError):
                        os.fchmod(fd, stat.S_IMODE(os.stat(real).st_mode))
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, real)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
    finally:
        with _WRITING_LOCK:
            _WRITING.discard(temporary)
    _fsync_directory(directory)


def _remove_stale_temporaries(real: str) -> None:
    """Remove the temporary files that saves of ``real`` (a path with no symlink left) left
    beside it when their process died.

    Only names a save of this very file gives (``.NAME.PID.HEX8.tmp``) are looked at, and one
    is removed when its writer cannot be writing it any more: no process has its pid, or the pid
    is this process's and no save of this process writes it now (an earlier process had the
    same pid: a restarted container), or it was not modified for :data:`STALE_AFTER` seconds (the
    pid was reused). The file of a save running now, in this process or another, is kept.
    Nothing here raises: a directory that cannot be listed, or a file that cannot be removed,
    is left as it is.
    """
    directory, name = os.path.split(real)
    pattern = re.compile(rf"\.{re.escape(name)}\.([0-9]{{1,12}})\.[0-9a-f]{{8}}\.tmp")
    try:
        names = os.listdir(directory or ".")
    except OSError:
        return
    own = os.getpid()
    for entry in names:
        match = pattern.fullmatch(entry)
        if match is None:
            continue
        path = os.path.join(directory, entry)
        pid = int(match.group(1))
        with _WRITING_LOCK:  # held while removing: a save of this process cannot start in it
            if path in _WRITING:
                continue
            if pid != own and _alive(pid):
                try:
                    if time.time() - os.lstat(path).st_mtime < STALE_AFTER:
                        continue
                except OSError:
                    continue  # gone already
            try:
                os.unlink(path)
            except OSError:
                continue  # removed by another cleaner meanwhile, or not ours to remove
        log.info("varmq: removed %s, left by a save of %s that did not finish", path, real)


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` runs (``True`` where that cannot be told)."""
    if pid <= 0:
        return False  # never the pid of a process that wrote a file
    if os.name == "nt":
        return True  # os.kill(pid, 0) would send CTRL_C_EVENT there: only the age decides
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OverflowError, ValueError):
        return False  # not a pid this system can have
    except OSError:
        return True  # PermissionError: it runs, as another user
    return True


def _fsync_directory(directory: str) -> None:
    """Make a rename in ``directory`` durable (where the platform can open a directory)."""
    if not hasattr(os, "O_DIRECTORY"):
        return  # Windows: a rename is durable once MoveFileEx returned
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
