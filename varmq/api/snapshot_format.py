"""The snapshot file format (version 1): queues to JSON text and back, with every check.

One UTF-8 JSON object, its format name and version first and one job per line, so that a
person can open it and read it::

    {"format":"varmq-snapshot","version":1,"saved_at":1718000000.25,"queues":[
    {"name":"orders","kind":"fifo","retry":{"max_attempts":5,"backoff":1.0,...},"poison_limit":5,
    "jobs":[
    {"id":"a1","priority":0,"enqueued_at":1718000000.1,"attempts":0,"data":{"to":"x"}},
    {"id":"a2","priority":0,"enqueued_at":1718000000.2,"attempts":1,"data":{"to":"y"}}
    ],
    "delayed":[
    {"id":"b1","priority":0,"enqueued_at":1717999990.0,"attempts":0,"due_at":1718000030.0,"data":7}
    ],
    "dead":[
    {"id":"c1","priority":0,"attempts":5,"error":"ValueError: no","dead_at":1717999000.0,"data":0}
    ]}
    ]}

Per queue: ``name``; ``kind`` (``"fifo"`` or ``"priority"``); ``retry``, the retry policy
(``max_attempts``, ``backoff``, ``multiplier``, ``max_delay``, ``jitter`` and
``non_retryable`` as ``"module:QualifiedName"`` of exception classes) or ``null``;
``poison_limit``, the worker's; ``jobs``, the waiting jobs in the order they would be taken;
``delayed``, in the order they fall due; ``dead``, the dead letters, oldest first. Per job:
``id`` (``""``: none), ``priority`` (0 in a FIFO queue), ``enqueued_at``, ``due_at`` and
``dead_at`` (Unix times, seconds), ``attempts`` (runs it already had: 0 for a job that never
ran; a dead letter's runs in all), ``error`` (a dead letter's last error as text), and
``data``, last. Other fields are ignored, so a later varmq may add some within version 1.

The decoder takes nothing on trust: the first thing wrong raises
:class:`~varmq.errors.PersistenceError` naming the file, queue and job. The encoder refuses
what the decoder would refuse, before anything is written. No I/O here.
"""

from __future__ import annotations

import json
import math
import operator
import sys
import time
from dataclasses import dataclass
from typing import Any, NoReturn

from ..model.errors import PersistenceError
from ..model.jobs import EnqueuedJob, JobStatus
from ..model.retry import DeadLetter, Retry, retry_from_json, retry_to_json
from ..sources.memory_queues import MemoryPriorityQueue, MemoryQueue, Restored

__all__ = ["FORMAT", "MAX_DIGITS", "VERSION", "Cut", "Refusal", "decode", "encode"]

FORMAT = "varmq-snapshot"
VERSION = 1

MAX_DIGITS = 4300
"""The longest integer Python writes or reads as text by default (``sys.int_info``)."""


def _digit_limit() -> int:
    """Digits a priority may have: what any Python reads by default, or this one writes."""
    limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()
    return min(MAX_DIGITS, limit) if limit > 0 else MAX_DIGITS


@dataclass
class Cut:
    """One queue as copied for a snapshot (by :func:`varmq.api.snapshots._cut`)."""

    name: str
    prioritised: bool
    retry: Retry | None
    poison_limit: int
    #: Waiting jobs, in the order they would be taken.
    jobs: list[EnqueuedJob[Any]]
    #: ``(wall-clock due time, job)``, in due order.
    delayed: list[tuple[float, EnqueuedJob[Any]]]
    dead: list[tuple[DeadLetter, Any]]


class Refusal:
    """Raises the :class:`PersistenceError` of one save (``loading=False``) or load of
    ``path``: what is wrong, where (queue, job), and that nothing was written or loaded."""

    def __init__(self, path: str, loading: bool) -> None:
        self.path = path
        self.loading = loading

    def __call__(
        self,
        problem: str,
        queue: str | None = None,
        job_id: str | None = None,
        position: str = "",
    ) -> NoReturn:
        where = [] if queue is None else [f"queue {queue!r}"]
        if job_id:
            where.append(f"job {job_id!r}")
        elif job_id is not None:
            where.append(f"the job without an id at {position}")
        at = f"{', '.join(where)}: " if where else ""
        if self.loading:
            message = f"varmq: {self.path}: {at}{problem}; refusing to load it"
        else:
            message = (
                f"varmq: cannot save queues to {self.path}: {at}{problem}; nothing was written"
            )
        raise PersistenceError(message, path=self.path, queue=queue, job_id=job_id)


# -- encoding --------------------------------------------------------------------------------

_ENCODERS = {
    ascii_only: json.JSONEncoder(
        ensure_ascii=ascii_only, allow_nan=False, separators=(",", ":")
    ).encode
    for ascii_only in (False, True)
}


def encode(cuts: list[Cut], path: str) -> bytes:
    """The file for ``cuts``, as UTF-8 bytes; raises :class:`PersistenceError` for anything
    the decoder would refuse."""
    refuse = Refusal(path, loading=False)
    parts = [_queue_parts(cut, refuse) for cut in cuts]
    try:
        return _text(parts, refuse, ascii_only=False).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate in a string: escape every non-ASCII character
        return _text(parts, refuse, ascii_only=True).encode("ascii")


_Parts = tuple[
    Cut, dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]
]


def _queue_parts(cut: Cut, refuse: Refusal) -> _Parts:
    """The header and the records of one queue, checked."""
    limit = _digit_limit()
    high = 10**limit  # a priority strictly between low and high has at most `limit` digits
    low = -high  # computed once: negating a 4,300-digit number per job is not free
    seen: set[str] = set()

    def checked(job: EnqueuedJob[Any], section: str, index: int) -> tuple[str, int]:
        job_id, priority = job.id, job._priority
        if type(job_id) is not str:
            refuse(f"a job id must be a string, got {type(job_id).__name__}", cut.name)
        if type(priority) is not int:
            try:
                priority = operator.index(priority)
            except TypeError:
                refuse(
                    f"priority {priority!r} is not a whole number",
                    cut.name,
                    job_id,
                    f"{section}[{index}]",
                )
        if not low < priority < high:
            refuse(
                f"its priority has more than {limit:,} digits, longer than Python writes as text",
                cut.name,
                job_id,
                f"{section}[{index}]",
            )
        if job_id and section != "dead":
            if job_id in seen:
                refuse("two jobs waiting or delayed have this id", cut.name, job_id)
            seen.add(job_id)
        return job_id, priority

    def record(job: EnqueuedJob[Any], section: str, index: int) -> dict[str, Any]:
        job_id, priority = checked(job, section, index)
        return {
            "id": job_id,
            "priority": priority,
            "enqueued_at": job._enqueued_at,
            "attempts": job.attempt - 1,
            "data": job.data,
        }

    jobs = [record(job, "jobs", index) for index, job in enumerate(cut.jobs)]
    delayed = []
    for index, (due, job) in enumerate(cut.delayed):
        fields = record(job, "delayed", index)
        fields["due_at"] = due
        fields["data"] = fields.pop("data")  # data last, for whoever reads the file
        delayed.append(fields)
    dead = [
        {
            "id": letter.id,
            "priority": checked(job, "dead", index)[1],
            "attempts": letter.attempts,
            "error": letter.error,
            "dead_at": letter.dead_at,
            "data": letter.data,
        }
        for index, (letter, job) in enumerate(cut.dead)
    ]
    header = {
        "name": cut.name,
        "kind": "priority" if cut.prioritised else "fifo",
        "retry": None if cut.retry is None else _retry_fields(cut.retry, cut.name, refuse),
        "poison_limit": cut.poison_limit,
    }
    return cut, header, jobs, delayed, dead


def _retry_fields(retry: Retry, queue: str, refuse: Refusal) -> dict[str, Any]:
    try:
        return retry_to_json(retry)
    except ValueError as exc:
        refuse(f"its retry policy cannot be saved: {exc}", queue)


def _text(parts: list[_Parts], refuse: Refusal, ascii_only: bool) -> str:
    encode_value = _ENCODERS[ascii_only]
    saved_at = encode_value(time.time())
    out = [f'{{"format":"{FORMAT}","version":{VERSION},"saved_at":{saved_at},"queues":[\n']
    for number, (cut, header, jobs, delayed, dead) in enumerate(parts):
        out.append(encode_value(header)[:-1])  # the header object, left open
        for section, records in (("jobs", jobs), ("delayed", delayed), ("dead", dead)):
            out.append(f',\n"{section}":[\n' if records else f',\n"{section}":[')
            try:
                out.append(",\n".join(map(encode_value, records)))
            except (TypeError, ValueError, RecursionError):
                _refuse_data(records, encode_value, cut.name, section, refuse)
            out.append("\n]" if records else "]")
        out.append("}\n" if number == len(parts) - 1 else "},\n")
    out.append("]}\n")
    return "".join(out)


def _refuse_data(
    records: list[dict[str, Any]], encode_value: Any, queue: str, section: str, refuse: Refusal
) -> NoReturn:
    """Name the first record whose data JSON cannot express."""
    for index, record in enumerate(records):
        try:
            encode_value(record)
        except (TypeError, ValueError, RecursionError) as exc:
            refuse(
                f"its data cannot be saved as JSON ({type(exc).__name__}: {exc})",
                queue,
                record["id"],
                f"{section}[{index}]",
            )
    raise AssertionError("a record failed to encode, then encoded")  # pragma: no cover


# -- decoding --------------------------------------------------------------------------------


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def decode(raw: bytes, path: str) -> dict[str, MemoryQueue | MemoryPriorityQueue]:
    """The queues of a snapshot file's bytes, by name, in file order."""
    refuse = Refusal(path, loading=True)
    if not raw.strip():
        refuse("the file is empty, not a snapshot (a save never leaves an empty file)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        refuse(f"it is not UTF-8 text ({exc.reason} at byte {exc.start}): damaged?")
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        # JSON strings hold no raw line breaks, so an unterminated one ran into the end.
        if exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string"):
            refuse("it ends in the middle of its JSON: truncated")
        refuse(f"it is not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno})")
    except (ValueError, RecursionError) as exc:
        refuse(f"it is not a file varmq wrote ({exc})")
    if type(doc) is not dict or doc.get("format") != FORMAT:
        refuse(f'it is JSON, but not a varmq snapshot (no "format": "{FORMAT}")')
    version = doc.get("version")
    if type(version) is not int or version != VERSION:
        refuse(f"it has snapshot format version {version!r}; this varmq reads version {VERSION}")
    queues = doc.get("queues")
    if type(queues) is not list:
        refuse('its "queues" is not a list')
    loaded: dict[str, MemoryQueue | MemoryPriorityQueue] = {}
    for index, obj in enumerate(queues):
        queue = _queue(obj, index, refuse)
        assert queue.name is not None
        if queue.name in loaded:
            refuse("two queues have this name", queue.name)
        loaded[queue.name] = queue
    return loaded


def _queue(obj: Any, index: int, refuse: Refusal) -> MemoryQueue | MemoryPriorityQueue:
    if type(obj) is not dict:
        refuse(f"queues[{index}] is not a JSON object")
    name = obj.get("name")
    if type(name) is not str or not name:
        refuse(f"queues[{index}] has no name")
    kind = obj.get("kind")
    if kind not in ("fifo", "priority"):
        refuse(f'its kind is {kind!r}, not "fifo" or "priority"', name)
    poison_limit = obj.get("poison_limit")
    if poison_limit is not None and (type(poison_limit) is not int or poison_limit < 1):
        refuse(f"poison_limit {poison_limit!r} is not a whole number >= 1", name)
    for section in _SECTIONS:
        if type(obj.get(section)) is not list:
            refuse(f'its "{section}" is not a list', name)
    queue = MemoryPriorityQueue(name=name) if kind == "priority" else MemoryQueue(name=name)
    retry = obj.get("retry")
    if retry is not None:
        try:
            queue.retry = retry_from_json(retry)
        except ValueError as exc:
            refuse(f"its retry settings are refused: {exc}", name)
    queue.poison_limit = poison_limit
    seen: set[str] = set()
    waiting, _, _ = _records(obj["jobs"], "jobs", name, seen, refuse)
    if isinstance(queue, MemoryPriorityQueue):
        for job in waiting:
            queue.enqueue(job, job._priority)
    else:
        for job in waiting:
            queue.enqueue(job)
    delayed, dues, _ = _records(obj["delayed"], "delayed", name, seen, refuse)
    dead, dead_ats, errors = _records(obj["dead"], "dead", name, seen, refuse)
    if delayed or dead:
        queue.shelve(
            Restored(
                delayed=list(zip(dues, delayed, strict=True)),
                dead=list(zip(dead, errors, dead_ats, strict=True)),
            )
        )
    return queue


# What each record holds besides id, priority, attempts and data: its times, and an error.
_SECTIONS = {
    "jobs": ("enqueued_at",),
    "delayed": ("enqueued_at", "due_at"),
    "dead": ("dead_at",),
}
_NUMBER_TYPES = (int, float)


def _records(
    records: list[Any], section: str, queue: str, seen: set[str], refuse: Refusal
) -> tuple[list[EnqueuedJob[Any]], list[float], list[str]]:
    """The jobs of one section, their last time field (``due_at``, ``dead_at`` or
    ``enqueued_at``) and their error texts (dead letters; else ``""``), as parallel lists.

    Each record is dropped from ``records`` once its job is made: a large file then leaves
    fewer live objects for the garbage collector to walk while the jobs are built.
    """
    times = _SECTIONS[section]
    first, last = times[0], times[-1]
    dead = section == "dead"
    unique = not dead  # dead letters are a record of what happened: ids may repeat
    isfinite = math.isfinite
    queued = JobStatus.QUEUED
    jobs: list[EnqueuedJob[Any]] = []
    whens: list[float] = []
    errors: list[str] = []
    for index, record in enumerate(records):
        try:
            job_id = record["id"]
            priority = record["priority"]
            attempts = record["attempts"]
            at = record[first]
            when = record[last]
            error = record["error"] if dead else ""
            data = record["data"]
        except (KeyError, TypeError, IndexError):
            _refuse_record(record, section, index, queue, refuse)
        if (
            type(job_id) is not str
            or type(priority) is not int
            or type(attempts) is not int
            or attempts < 0
            or type(at) not in _NUMBER_TYPES
            or not isfinite(at)
            or type(when) not in _NUMBER_TYPES
            or not isfinite(when)
            or type(error) is not str
        ):
            _refuse_record(record, section, index, queue, refuse)
        if unique and job_id:
            if job_id in seen:
                refuse("two jobs waiting or delayed have this id", queue, job_id)
            seen.add(job_id)
        job: EnqueuedJob[Any] = EnqueuedJob(job_id, data)
        job._priority = priority  # what job._queued(priority) does, without a call per job
        job._status = queued
        if dead:
            job.attempt = attempts
        else:
            job.attempt = attempts + 1
            job._enqueued_at = float(at)
        jobs.append(job)
        whens.append(float(when))
        errors.append(error)
        records[index] = None
    return jobs, whens, errors


def _refuse_record(record: Any, section: str, index: int, queue: str, refuse: Refusal) -> NoReturn:
    """Say what is wrong with a record the fast check turned down."""
    position = f"{section}[{index}]"
    if type(record) is not dict:
        refuse(f"{position} is not a JSON object", queue)
    job_id = record.get("id")
    if type(job_id) is not str:
        refuse(f'{position} has no string "id"', queue)
    fields: dict[str, tuple[str, Any]] = {
        "priority": ("a whole number", lambda v: type(v) is int),
        "attempts": ("a whole number >= 0", lambda v: type(v) is int and v >= 0),
        "data": ("present", lambda v: True),
    }
    for name in _SECTIONS[section]:
        fields[name] = (
            "a finite number (Unix time)",
            lambda v: type(v) in _NUMBER_TYPES and math.isfinite(v),
        )
    if section == "dead":
        fields["error"] = ("a string", lambda v: type(v) is str)
    for name, (expected, ok) in fields.items():
        if name not in record:
            refuse(f'"{name}" is missing', queue, job_id, position)
        if not ok(record[name]):
            refuse(f'"{name}" is {record[name]!r}, not {expected}', queue, job_id, position)
    raise AssertionError(f"{position} refused, and found fine")  # pragma: no cover
