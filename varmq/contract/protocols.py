"""The storage contract: what a queue must offer for a worker to take jobs from it.

This is the one page an adapter author reads. Every interface is a ``typing.Protocol``
checked structurally at runtime (``isinstance(q, IPersistentQueue)``), so an adapter needs
methods of the same shape and nothing else. What an adapter may share with the core lives in
this package, :mod:`varmq.contract` (standard library only): these protocols, the envelope
(:mod:`~varmq.contract.envelope`), topic names (:mod:`~varmq.contract.topic_names`), the
argument rules (:mod:`~varmq.contract.rules`) and the group commit of concurrent writes
(:mod:`~varmq.contract.batching`). ``redisq`` and ``sqliteq`` import these and nothing else of
varmq; so does the reference storage in ``varmq.testing``.

What the worker stores
    Persistent and distributed queues receive each job as ``bytes``: a JSON object whose first
    three fields are ``{"id": <str>, "status": "Created", "data": <payload>}``. More fields may
    follow. The adapter stores the bytes as it got them and hands the same bytes back; it never
    needs to parse them.

What a take means
    ``dequeue_with_ack_id`` (and the batch variants) hands a job out together with an *ack id*.
    The ack id is a lease token: unique per delivery, never reused. Until it is acknowledged, the
    job is in flight: not counted by ``len()``, not handed to anyone else. When the adapter
    implements :class:`ILeaseExtendable`, the lease expires ``lease_seconds`` after the take
    unless extended; an expired job becomes available again (same priority, same place in
    line) and a later ``acknowledge`` or ``extend_lease`` with the stale token returns ``False``.
    Taking and recording the lease must be one atomic step: a crash between the two must not
    lose the job.

Which methods the worker calls
    - take: ``dequeue_batch_with_attempts(n)`` if offered, else ``dequeue_batch_with_ack_ids(n)``,
      else ``dequeue_with_ack_id()`` once per free slot;
    - finish: ``acknowledge_many(ack_ids)`` if offered (one round trip for several finished jobs),
      else ``acknowledge(ack_id)`` per job;
    - while a job runs: ``extend_lease(ack_id)`` well before ``lease_seconds`` elapse;
    - a job taken and never started, when the worker stops: ``release(ack_id)``;
    - a job that failed and will be retried: ``nack(ack_id, delay)``; one out of attempts, or
      whose bytes never decode: ``dead_letter(ack_id, reason)``;
    - add: ``enqueue_dedup(item, job_id, priority)`` when the caller gave a job id and the queue
      offers it, else ``enqueue``;
    - ``__len__`` for ``len(handle)``, ``num_pending`` and the length-based strategies, and
      ``subscribe`` once, when a distributed queue is bound;
    - on a queue that keeps job records (:class:`IJobRecords`, ``keep_results`` above 0): a
      result worker finishes with ``acknowledge_with_results``, every worker ends a failure that
      is final with ``fail`` and buries with ``dead_letter_with_error``, and renews with
      ``extend_lease_or_cancel``; handles read ``job_record``, call ``cancel`` and wait through
      ``subscribe_records`` (:class:`IRecordSubscribable`) when the storage offers it; a
      running job's ``set_progress`` goes to ``set_progress`` (:class:`IJobProgress`).

Delays and the order of the line
    Jobs are handed out by priority (lower first), then by the time they became available,
    then by the order in which they joined the line. A plain enqueue makes a job available at
    once. A job given a delay, by ``enqueue_delayed(item, delay)`` or ``nack(ack_id, delay)``,
    becomes available ``delay`` seconds later and joins the end of its priority's line at that
    moment: it never overtakes jobs that were already waiting. A delay of zero or less means
    now, at the end of the line. A job whose lease expired is different: it goes back to the
    place it had, with its original availability time.

    Delays need no timer thread. Every take first moves the jobs that became due into line,
    a bounded number per call, as it moves back jobs whose lease expired; so a delayed job is
    never handed out before its time and is handed out by the first take after it. ``len()``
    and ``values()`` count and list only jobs available now: not delayed, not in flight. A
    storage records a delay as an absolute deadline on its own clock, in whole milliseconds
    rounded up (never early), so delays survive a restart.

Retries
    ``nack(ack_id, delay)`` gives a leased job back. It is fenced like ``acknowledge``: an
    unknown, expired or taken-over ack id returns ``False`` and changes nothing. The job keeps
    its priority and its delivery count, so the next take reports one more attempt.

Dead letters
    ``dead_letter(ack_id, error)``, fenced the same way, moves the job out of the queue onto the
    queue's dead-letter shelf in one atomic step, recording a :class:`DeadLetterRecord`: the
    item bytes, the attempts (deliveries so far), the error text and ``dead_at`` (Unix seconds,
    a float). Dead letters are not counted by ``len()``, not listed by ``values()`` and never
    handed out. ``dead_letters(limit)`` lists up to ``limit`` of them, oldest first; ``key`` is
    an opaque string that names one of them. ``requeue_dead(keys=None)`` puts the named dead
    letters (all of them for ``None``) back at the end of their priority's line, available now,
    with the delivery count reset so that the next take is attempt 1, and returns how many;
    unknown keys are ignored. ``purge_dead()`` deletes them all and returns how many.

    The shelf is bounded by two queue options, applied in the same atomic step that adds a
    dead letter: ``dead_letter_limit`` (default 10,000 per queue; the oldest beyond it are
    dropped) and ``dead_letter_max_age`` (default 604,800 s, seven days).

Job ids
    A job id given to ``enqueue_dedup`` or ``enqueue_delayed`` is stored while its job waits,
    is delayed or is in flight; adding it again meanwhile stores nothing and returns ``True``.
    Once the job is acknowledged or dead-lettered, the id is free again.

Job records
    A queue opened with the option ``keep_results`` (seconds; default 0, off) implements
    :class:`IJobRecords`: it keeps a :class:`StoredJobRecord` for every job added *with a job
    id* (``enqueue_dedup``, ``enqueue_delayed`` with an id) through an object opened with
    records on, so that any process can ask what became of the job, wait for its end and cancel
    it. A job added without an id has no record. Its ``state`` is one of :data:`JOB_STATES`:

    - ``"queued"``: waiting in line (also after its lease expired, after a ``release``, after
      ``nack(ack_id, 0)`` and ``requeue_dead``);
    - ``"delayed"``: added with a delay, or nacked with one, and not due yet;
    - ``"running"``: leased to a consumer (``attempts`` counts the deliveries so far,
      ``started_at`` is the last take);
    - ``"succeeded"``: acknowledged; ``result`` holds the bytes given with the acknowledgement,
      ``None`` after a plain ``acknowledge``;
    - ``"failed"``: ended by ``fail``, with its ``error`` bytes;
    - ``"dead"``: moved to the dead letters (``error`` holds the bytes given to
      ``dead_letter_with_error``, ``None`` after a plain ``dead_letter``);
    - ``"cancelled"``: removed by ``cancel`` or ``purge`` before it ran, or ended by any failing
      settle (``fail``, ``nack``, ``dead_letter``) or by the expiry of its lease once a cancel was
      requested while it ran.

    The last four are the ended states (:data:`ENDED_STATES`). Times are Unix seconds (floats)
    on the storage's clock (the server's for a shared server). ``result`` and ``error`` are
    opaque bytes written by the worker (JSON); the storage hands them back as it got them.

    Writing an outcome is part of the settle that ends the job: ``acknowledge_with_results``,
    ``fail`` and ``dead_letter_with_error`` are fenced like ``acknowledge`` (a stale ack id
    returns ``False`` and changes nothing, record included) and change the job and its record
    in one atomic step, so a record never says ``"succeeded"`` for a job that will be handed out
    again, and a job whose consumer died before its settle is ``"queued"`` (lease expired) or
    ``"running"``, never ended. Every other transition above happens in the same atomic step as
    the change of the job it follows (take, nack, release, dead letter, expiry, purge).

    An ended record is kept ``keep_results`` seconds after ``finished_at``, then dropped; and at
    most ``keep_results_limit`` ended records are kept per queue (default 10,000), the oldest
    beyond it dropped in the step that ends another. The ``keep_results`` of the object that
    added the job applies to its record, the ``keep_results_limit`` of the object that ends it;
    open every object of one queue with the same settings. While its record is kept a job id
    stays taken: ``enqueue_dedup`` or ``enqueue_delayed`` with that id stores nothing and
    returns ``True``, also after the job ended (an id names one job for as long as anybody can
    ask about it; this is what makes a recurring job fire once however many processes add it).

    ``cancel(job_id)`` removes a queued or delayed job at once (``"cancelled"``), and flags a
    running one: ``cancel_requested`` becomes ``True`` and ``extend_lease_or_cancel`` answers
    ``"cancel"`` to its consumer, which stops the job and settles it with ``fail`` (recorded
    ``"cancelled"``). A job that is acknowledged after the request did run to its end: it is
    ``"succeeded"``. ``cancel`` returns whether there was a job to cancel (``False`` for an
    unknown id or an ended job).

    :class:`IRecordSubscribable` lets waiters hear of ends instead of reading in a loop:
    ``subscribe_records(callback)`` calls ``callback(job_id)`` after a record of the queue ended,
    through any object and in any process; delivery may be lossy, so waiters read again now and
    then. A queue object opened without records adds jobs without records and its settles keep
    no outcome, but ``job_record`` and ``cancel`` answer from the records the queue keeps
    whatever the object's own ``keep_results`` (so an operator's tool reads them without
    knowing the option): ``None`` and ``False`` where there is none.

Job progress
    A queue that keeps job records may also keep the *progress* of running jobs
    (:class:`IJobProgress`): ``set_progress(ack_id, progress)`` stores ``progress`` (opaque
    bytes, written by the worker: the JSON ``{"fraction": <0..1>, "message": <str|null>}``)
    as the ``progress`` of the record of the job leased under ``ack_id``, and ``job_record``
    returns it (``None`` when none was set). It is fenced like ``acknowledge``: ``False`` and
    nothing stored when the lease is unknown, expired or taken over, so a consumer whose job
    was handed to another cannot overwrite the new run's progress. A job without a record
    (added without an id, or through an object without records) stores nothing either:
    ``False`` too, so the worker writes no more for that lease. ``True``: stored. A progress
    write changes nothing else: not the record's state, attempts, times or outcome, not the
    lease. Every take of a job (a retry, a redelivery after its lease expired) clears its
    progress in the same atomic step, so a new attempt starts with none; the settle that ends
    a job keeps its last progress in the ended record, which keeps it as long as it is kept.
    Works after ``close()``, like ``acknowledge``. The worker writes at most four times a
    second per job.

Stats
    ``stats()`` returns a :class:`QueueStats` in one cheap call: ``waiting`` (what ``len()``
    counts), ``in_flight`` (leased, lease not expired), ``delayed`` (available later), ``dead``
    (dead letters) and ``oldest_age`` (seconds since the oldest waiting job became available,
    ``0.0`` when none waits). The four counts are ints and ``oldest_age`` is a float.

Rate limits
    A queue opened with ``rate_limit=(count, seconds)`` (the option is stored with the queue:
    :mod:`varmq.contract.stored_settings`) starts at most ``count`` jobs in any window of
    ``seconds``, across every consumer of every process: each job a take leases counts as a
    start at the take's time on the storage's clock, for ``seconds``. The take hands out no
    more than the window has left, in the same atomic step as the lease (a job held back is
    not leased, its attempts are not counted, it stays waiting in its place). A take that the
    limit cut short leaves :meth:`IRateLimited.throttled_for` saying how long until the window
    lets another job start, so a consumer sleeps until then instead of polling. Jobs released,
    nacked or redelivered count again at their next take. ``stats()`` of such a queue adds
    ``rate_window_used`` (starts in the window now) and ``throttled`` (the window is full and
    jobs wait).

Finding queues (on the store, not a protocol)
    The object that opens queues (``sqliteq.Queues``, ``redisq.Queues``, the reference
    storage) offers ``list_queues()``, the ``(name, kind)`` of every queue ever created in
    that store with kind ``"fifo"`` or ``"priority"``, and ``open_queue(name)``, which opens an
    existing queue as its own kind, in its distributed variant so that it can subscribe, and
    raises a ``LookupError`` naming the queue when there is none. Opening a name as the other
    kind raises ``ValueError``. Every store opens its four kinds through one internal opener,
    so every ``new_*`` call and ``open_queue`` check their options alike.

Arguments and options
    Every storage checks its arguments the same way, before it stores anything. A value of the
    wrong type raises ``TypeError``; a value of the right type out of range raises
    ``ValueError``; both name the store, the queue, the argument and the value. (``bool`` is
    not accepted where a number is expected.) A closed or full queue refuses with ``False``
    and a stale ack id gives ``False``: those are answers, not errors. The rules:

    - queue names: a ``str`` of 1 to 200 bytes in UTF-8 (so text that cannot be encoded, such
      as a lone surrogate, is refused too);
    - items: ``bytes``, ``bytearray``, ``memoryview`` or ``str`` (stored as UTF-8; a ``str``
      that UTF-8 cannot encode raises ``ValueError``);
    - priorities (priority queues): an ``int`` from ``-2**53`` to ``2**53``; ``None`` means 0
      in ``enqueue_dedup`` and ``enqueue_delayed``. FIFO queues ignore the priority argument;
    - job ids: a non-empty ``str`` that UTF-8 can encode (``enqueue_delayed`` also takes
      ``None``: no dedup); the same for ``job_record`` and ``cancel``;
    - outcomes (``acknowledge_with_results``, ``fail``, ``dead_letter_with_error``): ``bytes``,
      ``bytearray``, ``memoryview`` or ``str``, like items;
    - ack ids are opaque: anything that is not the ``str`` of a held lease gives ``False``;
    - delays (``enqueue_delayed``, ``nack``): an ``int`` or ``float``, finite, at most
      ``3_153_600_000`` seconds (100 years of 365 days); zero or less means now;
    - ``visibility_timeout``: seconds, finite, above 0 and at most 604,800 (seven days; the
      worker renews leases, so long jobs need no long timeout); default 300;
    - ``dead_letter_limit``: an ``int`` of at least 1; default 10,000;
    - ``dead_letter_max_age``: seconds, finite, above 0 and at most 100 years; default 7 days;
    - ``keep_results``: seconds, finite, at least 0 (0: no records) and at most 100 years;
      default 0;
    - ``keep_results_limit``: an ``int`` of at least 1; default 10,000;
    - counts (``set_capacity``, ``dead_letters(limit)``, batch sizes): an ``int`` below
      ``2**63``; a capacity or a limit is at least 0 (``set_capacity(0)``: unlimited,
      ``dead_letters(0)``: ``[]``); a batch of ``n <= 0`` takes nothing;
    - ``requeue_dead(keys)``: ``None`` or a collection of ``str``; one ``str`` or ``bytes`` on
      its own is refused, since it would be read as a collection of characters;
    - an option a store does not know raises ``TypeError``;
    - the error text of ``dead_letter`` is any object, kept as its ``str``; characters UTF-8
      cannot encode (lone surrogates) are kept escaped, as ``"\\udcff"``.

    :mod:`varmq.contract.rules` holds these checks, with their messages, for every storage to
    call; an adapter adds rows for options of its own. The conformance suite
    (``varmq.testing``) checks that each storage applies them.

After ``close()``
    The queue object refuses enqueues and hands out no more jobs, but ``acknowledge`` and
    ``extend_lease`` of jobs it handed out before still work: a worker that stops after the
    close must be able to finish what it took.

A storage that cannot answer
    raises; it never answers for the storage. When the server is down, the file is locked past
    the store's busy timeout, the disk is full or the database damaged, a method raises an
    exception of the adapter's own (best a subclass of ``ConnectionError`` or ``OSError``,
    never ``TypeError`` or ``ValueError``, which mean a caller's mistake) naming the store, so
    that the worker can tell an outage from its answers: ``[]`` from a take means "empty",
    ``False`` from ``extend_lease`` means "this lease is not yours any more", ``0`` from
    ``len()`` means "nothing waits". The worker reports an outage
    (:class:`~varmq.FailedToDequeueError` on ``errs()``), keeps a lease it cannot renew until
    its own deadline for it has passed, and shows an unreachable queue as such, never as an
    empty one. A call raises within a bounded time (the adapter documents how long), and
    nothing it was asked to do is half done.

Topics (on the store: ``IStorageTopics``, ``ILiveTopics``)
    A store's ``topics()`` returns its topics object. Names and patterns are as in memory
    (:mod:`varmq.contract.topic_names`: dot-separated words, ``*`` one word, ``#`` zero or more; a
    bad one raises ``ValueError`` naming the offending part). ``bind(pattern, queue)`` records, in
    the storage, that every publish whose name matches ``pattern`` stores a copy in the queue named
    ``queue`` of the same store; every process publishing through that store honours every binding,
    whoever made it. The queue need not exist yet: a copy for a name never opened makes it a FIFO
    queue (open a priority queue before binding it; its copies get priority 0). ``bind`` returns
    whether the binding is new, ``unbind`` whether there was one, and ``bindings()`` lists
    ``(pattern, queue)`` pairs sorted by pattern, then queue.

    ``publish(name, data, *, message_id=None)`` stores one copy in each bound queue whose
    pattern matches (one copy per queue, however many of its bindings match), in one atomic
    step with reading the bindings: every copy or none. Each copy is the envelope
    ``{"id": <job id>, "status": "Created", "data": data}`` (so ``data`` must be
    JSON-encodable: ``TypeError`` otherwise, before anything is stored), available at once
    and announced as any add is (``"enqueued"`` to subscribers, or found by the next poll).
    With a ``message_id``, the job id of the copy in queue ``q`` is
    ``varmq.contract.topic_names.copy_id(message_id, q)`` (``"<message_id>@<q>"``) and the copy is
    stored as ``enqueue_dedup`` stores it: not again while a copy with that id is stored, so
    a publish retried by any process, or after a restart, stores nothing twice. And the
    ``message_id`` itself is kept in the storage for the ``dedup_ttl`` seconds of the topics
    object that published it (``store.topics(dedup_ttl=...)``, default
    :data:`DEFAULT_TOPIC_DEDUP_TTL`, one day; 0 keeps none): a publish of a kept id, by any
    process, stores no copy and returns 0, even once the first copies were consumed. The id is
    kept in the same atomic step as the copies (Redis Cluster: after the last copy, so a retry
    of a partial publish completes it). Without a ``message_id``, each copy gets a fresh unique
    job id. ``publish`` returns how many copies it stored (0 for a retried publish). Where
    one atomic step is impossible (queues in different Redis Cluster slots), each copy is
    stored by its own dedup enqueue of the same job id, so a retried publish completes a
    partial one and still stores nothing twice. Capacities set on queue objects
    (``set_capacity``) limit those objects' own enqueues, not copies.

    ``ILiveTopics.subscribe(pattern, *, max_pending=1000, on_full="block",
    block_timeout=None)`` returns a live subscription (:class:`ILiveSubscription`) that
    receives what any process publishes while it is connected: at-most-once (nothing is kept
    for it while it is away, and a retried publish may be received twice), with the patterns
    of stored bindings. It buffers up to ``max_pending`` messages with the ``on_full``
    policies of in-memory topics; a publisher in another process never waits for it. After a
    dropped connection (or a restart of the server) it reconnects and subscribes again on its
    own, counts the reconnection in ``reconnects``, and adds to ``missed`` an upper bound of
    the publishes it may have missed meanwhile.

Workers seen from anywhere
    A worker bound to a storage queue keeps one record in the queue's store, reached through
    the queue's ``worker_registry`` (:class:`IHasWorkerRegistry`; every queue of one store
    gives the same registry). ``register_worker(worker_id, record, expires_after)`` stores the
    worker's record (JSON bytes, :mod:`varmq.contract.workers`), or replaces it: a refresh is a
    registration again. The store stamps ``last_seen`` with its own clock at each one and
    keeps ``started_at`` from the first; the record shows its worker as gone
    (``alive=False``) once ``expires_after`` seconds passed on that clock without one, and is
    dropped :data:`~varmq.contract.workers.GONE_KEPT` seconds later. ``remove_worker`` ends it
    at once (a clean stop); ``worker_records()`` lists them (:class:`StoredWorkerRecord`).

Every method may be called from any thread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, TypedDict, runtime_checkable

__all__ = [
    "DEFAULT_DEAD_LETTER_LIMIT",
    "DEFAULT_DEAD_LETTER_MAX_AGE",
    "DEFAULT_KEEP_RESULTS",
    "DEFAULT_KEEP_RESULTS_LIMIT",
    "DEFAULT_VISIBILITY_TIMEOUT",
    "ENDED_STATES",
    "JOB_STATES",
    "MAX_COUNT",
    "MAX_DELAY",
    "MAX_PRIORITY",
    "MAX_QUEUE_NAME_BYTES",
    "MAX_JOB_ID_BYTES",
    "DEFAULT_MAX_PAYLOAD",
    "DEFAULT_TOPIC_DEDUP_TTL",
    "MAX_VISIBILITY_TIMEOUT",
    "DeadLetterRecord",
    "IAcknowledgeable",
    "IAsyncEnqueue",
    "IBaseQueue",
    "IBatchAcknowledgeable",
    "ICapacitySetter",
    "ICountedDelivery",
    "IDeadLetterable",
    "IDedupQueue",
    "IRateLimited",
    "IScheduleMarks",
    "IDelayedEnqueue",
    "IDistributedPriorityQueue",
    "IDistributedQueue",
    "IJobProgress",
    "IJobRecords",
    "ILeaseExtendable",
    "ILiveSubscription",
    "ILiveTopics",
    "ILeaseReleasable",
    "IMultiAcknowledgeable",
    "INackable",
    "IPersistentPriorityQueue",
    "IPersistentQueue",
    "IPriorityQueue",
    "IQueue",
    "IQueueStats",
    "IHasWorkerRegistry",
    "IRecordSubscribable",
    "IStorageTopics",
    "ISubscribable",
    "JobState",
    "LeaseAnswer",
    "QueueStats",
    "RateStats",
    "StoredJobRecord",
    "IWorkerRegistry",
    "StoredWorkerRecord",
]

# The limits and defaults every storage shares (see "Arguments and options" above);
# varmq.contract.rules applies them.
MAX_QUEUE_NAME_BYTES = 200
"""Longest queue name, in bytes of UTF-8."""
MAX_JOB_ID_BYTES = 1024
"""Longest job id, in bytes of UTF-8: an id is a key, stored and indexed with every job."""
DEFAULT_MAX_PAYLOAD = 4 * 1024 * 1024
"""Largest stored job (its envelope's bytes) unless the queue is opened with another
``max_payload``: 4 MiB. A larger payload belongs in a blob store, the job carrying its key."""
DEFAULT_TOPIC_DEDUP_TTL = 86_400.0
"""Seconds a storage's topics keep a published ``message_id`` unless ``topics(dedup_ttl=...)``
says otherwise: one day, so a publish retried within it stores nothing, consumed or not."""
MAX_DELAY = 3_153_600_000.0
"""Longest delay (and longest ``dead_letter_max_age``), in seconds: 100 years of 365 days."""
MAX_VISIBILITY_TIMEOUT = 604_800.0
"""Longest ``visibility_timeout``, in seconds: seven days."""
MAX_PRIORITY = 2**53
"""Priorities run from ``-MAX_PRIORITY`` to ``MAX_PRIORITY``: integers a double holds exactly."""
MAX_COUNT = 2**63 - 1
"""Largest capacity, limit or batch size: a signed 64-bit integer."""
DEFAULT_VISIBILITY_TIMEOUT = 30.0
"""Seconds a lease lasts unless the queue is opened with another ``visibility_timeout``.

Short, because a worker renews the lease of every job it holds each third of it: a running job
keeps its lease however long it runs, and the jobs of a consumer that died come back within
this many seconds of its last renewal."""
DEFAULT_DEAD_LETTER_LIMIT = 10_000
"""Dead letters kept per queue unless opened with another ``dead_letter_limit``."""
DEFAULT_DEAD_LETTER_MAX_AGE = 604_800.0
"""Seconds a dead letter is kept unless opened with another ``dead_letter_max_age``: 7 days."""
DEFAULT_KEEP_RESULTS = 0.0
"""Seconds an ended job's record is kept unless opened with another ``keep_results``: 0, off."""
DEFAULT_KEEP_RESULTS_LIMIT = 10_000
"""Ended job records kept per queue unless opened with another ``keep_results_limit``."""

JobState = Literal["queued", "delayed", "running", "succeeded", "failed", "dead", "cancelled"]
"""Where a job with a record is (see "Job records" above)."""
JOB_STATES: tuple[JobState, ...] = (
    "queued",
    "delayed",
    "running",
    "succeeded",
    "failed",
    "dead",
    "cancelled",
)
"""Every state of a job record, in the order of a job's life."""
ENDED_STATES: frozenset[str] = frozenset({"succeeded", "failed", "dead", "cancelled"})
"""The states of a job that will not run again: its record is kept ``keep_results`` seconds."""
LeaseAnswer = Literal["held", "lost", "cancel"]
"""What :meth:`IJobRecords.extend_lease_or_cancel` answers."""


class QueueStats(TypedDict):
    """What :meth:`IQueueStats.stats` returns: where one queue's jobs are, across processes."""

    waiting: int
    """Jobs available to take now: what ``len()`` counts."""
    in_flight: int
    """Jobs leased, whose lease has not expired."""
    delayed: int
    """Jobs that become available later (delayed enqueues and nacks)."""
    dead: int
    """Dead letters on the queue's shelf."""
    oldest_age: float
    """Seconds since the oldest waiting job became available; ``0.0`` when none waits."""


class RateStats(QueueStats, total=False):
    """:class:`QueueStats` of a queue with a ``rate_limit``: two keys more."""

    rate_window_used: int
    """Jobs started in the current window (at most the limit's count)."""
    throttled: bool
    """The window is full and jobs wait: they start when it moves on."""


class DeadLetterRecord(TypedDict):
    """One entry of :meth:`IDeadLetterable.dead_letters`: a job that will not be retried."""

    key: str
    """Opaque; names this dead letter for ``requeue_dead``."""
    item: bytes
    """The stored bytes, as they were enqueued."""
    attempts: int
    """How often the job was handed out before it died."""
    error: str
    """The error text given to ``dead_letter``."""
    dead_at: float
    """When it died, in Unix seconds."""


class _RecordFields(TypedDict):
    """The fields every :class:`StoredJobRecord` has (documented there)."""

    id: str
    """The job id it was added with."""
    state: str
    """One of :data:`JOB_STATES`."""
    attempts: int
    """Deliveries so far (0 before the first take)."""
    result: bytes | None
    """The bytes given with the acknowledgement (``"succeeded"``), else ``None``."""
    error: bytes | None
    """The bytes given to ``fail`` or ``dead_letter_with_error``, else ``None``."""
    enqueued_at: float
    """When it was added (or requeued from the dead letters), in Unix seconds."""
    started_at: float | None
    """When it was last taken, in Unix seconds; ``None`` before the first take."""
    finished_at: float | None
    """When it ended, in Unix seconds; ``None`` until it is in an ended state."""
    cancel_requested: bool
    """Whether ``cancel`` flagged it while it ran."""


class StoredJobRecord(_RecordFields, total=False):
    """What :meth:`IJobRecords.job_record` returns: one job as its storage remembers it.

    ``id``, ``state``, ``attempts``, ``result``, ``error``, ``enqueued_at``, ``started_at``,
    ``finished_at`` and ``cancel_requested`` are always there; ``progress`` is returned by every
    storage that keeps progress (:class:`IJobProgress`), and may be missing from one that does
    not (read it with ``.get``).
    """

    progress: bytes | None
    """The bytes of the last ``set_progress`` of its last take (:class:`IJobProgress`); ``None``
    when none was set since."""


@runtime_checkable
class IBaseQueue(Protocol):
    """What every queue offers, in memory or in storage."""

    def __len__(self) -> int:
        """Jobs available to take now (not in flight, not delayed)."""
        ...

    def dequeue(self) -> Any | None:
        """Take one job without a lease; ``None`` when there is nothing to take."""
        ...

    def values(self) -> list[Any]:
        """A snapshot of the jobs waiting, in the order they would be taken."""
        ...

    def purge(self) -> None:
        """Remove every waiting job."""
        ...

    def close(self) -> None:
        """Refuse further enqueues. Jobs already stored stay."""
        ...


@runtime_checkable
class IQueue(IBaseQueue, Protocol):
    """A FIFO queue."""

    def enqueue(self, item: Any) -> bool:
        """Store ``item`` last in line; ``False`` when refused (closed, full, storage error)."""
        ...


@runtime_checkable
class IPriorityQueue(IBaseQueue, Protocol):
    """A priority queue: lower numbers first, first in first out among equal priorities."""

    def enqueue(self, item: Any, priority: int) -> bool:
        """Store ``item`` with ``priority``; ``False`` when refused."""
        ...


@runtime_checkable
class IAcknowledgeable(Protocol):
    """Takes with an ack id, and acknowledgement once the job is done."""

    def dequeue_with_ack_id(self) -> tuple[Any, str] | None:
        """Take one job and lease it; ``None`` when there is nothing to take."""
        ...

    def acknowledge(self, ack_id: str) -> bool:
        """Forget the job leased under ``ack_id``; ``False`` if the id is unknown or expired."""
        ...


@runtime_checkable
class IPersistentQueue(IQueue, IAcknowledgeable, Protocol):
    """A FIFO queue in storage that survives the process."""


@runtime_checkable
class IPersistentPriorityQueue(IPriorityQueue, IAcknowledgeable, Protocol):
    """A priority queue in storage that survives the process."""


@runtime_checkable
class ISubscribable(Protocol):
    """Storage that tells subscribers when any process added a job a consumer may be idle for."""

    def subscribe(self, callback: Callable[[str], None]) -> None:
        """Call ``callback("enqueued")`` when a job is added, by any process, while a consumer
        may be idle.

        The promise: every add made after a take came back short (fewer jobs than asked for,
        which is when a worker goes idle) is announced, by itself or by an earlier add made
        after that take. A storage may stay silent for adds while every consumer's last take
        came back full (they take again when a slot frees up), and may announce more often.
        Delivery may be lossy (Redis pub/sub is); the worker also polls.
        """
        ...


@runtime_checkable
class IDistributedQueue(IPersistentQueue, ISubscribable, Protocol):
    """A persistent FIFO queue shared by consumers in several processes."""


@runtime_checkable
class IDistributedPriorityQueue(IPersistentPriorityQueue, ISubscribable, Protocol):
    """A persistent priority queue shared by consumers in several processes."""


@runtime_checkable
class ICapacitySetter(Protocol):
    """Storage that can enforce a capacity itself."""

    def set_capacity(self, capacity: int) -> None:
        """Refuse enqueues once ``capacity`` jobs wait (0: unlimited)."""
        ...


@runtime_checkable
class IBatchAcknowledgeable(Protocol):
    """Several takes in one step."""

    def dequeue_batch_with_ack_ids(self, n: int) -> list[tuple[Any, str]]:
        """Take and lease up to ``n`` jobs atomically, each with its own ack id."""
        ...


@runtime_checkable
class ICountedDelivery(Protocol):
    """Batch takes that also say how often each job was handed out."""

    def dequeue_batch_with_attempts(self, n: int) -> list[tuple[Any, str, int]]:
        """Like ``dequeue_batch_with_ack_ids``; the third element is the delivery count.

        1 for a first delivery, 2 after one expired lease, and so on.
        """
        ...


@runtime_checkable
class IMultiAcknowledgeable(Protocol):
    """Several acknowledgements in one step."""

    def acknowledge_many(self, ack_ids: Sequence[str]) -> list[bool]:
        """Acknowledge each id; one result per id, in order, as ``acknowledge`` would give."""
        ...


@runtime_checkable
class IScheduleMarks(Protocol):
    """A queue that keeps, for each schedule, the latest occurrence added to it (its *mark*).

    A schedule's occurrence must run once however many processes declare the schedule and
    however many other jobs of the queue end meanwhile: a job record alone holds an id only
    until ``keep_results`` or ``keep_results_limit`` drops it. The mark is kept apart from the
    records (one small value per schedule and queue, never pruned).
    """

    def enqueue_occurrence(
        self,
        item: Any,
        job_id: str,
        schedule: str,
        occurrence: float,
        priority: int | None = None,
    ) -> bool:
        """Store ``item`` as ``enqueue_dedup`` does, unless the queue's mark of ``schedule``
        is at or after ``occurrence`` (Unix seconds, kept in whole milliseconds); in the same
        atomic step, move the mark to ``occurrence``. ``True``: stored now, or that occurrence
        (or a later one) was added already; ``False``: refused (the capacity), mark unchanged.
        ``schedule`` is a non-empty ``str``; ``occurrence`` a finite number (else
        ``TypeError``/``ValueError``, nothing stored).
        """
        ...


@runtime_checkable
class IDedupQueue(Protocol):
    """Enqueue that stores a job id at most once while it is still stored."""

    def enqueue_dedup(self, item: Any, job_id: str, priority: int | None = None) -> bool:
        """Store ``item`` unless a job with ``job_id`` is stored (waiting or in flight).

        Returns ``True`` in both cases (the job is there); ``False`` only when refused.
        ``priority`` is ``None`` for FIFO queues.
        """
        ...


@runtime_checkable
class ILeaseExtendable(Protocol):
    """Leases that expire unless the worker renews them."""

    @property
    def lease_seconds(self) -> float:
        """How long a lease lasts after a take or an extension."""
        ...

    def extend_lease(self, ack_id: str) -> bool:
        """Restart the lease of ``ack_id``; ``False`` when it was lost.

        A lease is lost as soon as its deadline passed, even before another consumer took the
        job: from then on ``extend_lease`` and ``acknowledge`` with that ack id return ``False``.
        A storage that cannot answer raises instead: the worker then keeps the lease until its
        own deadline for it has passed, and tries again.
        """
        ...


@runtime_checkable
class IAsyncEnqueue(Protocol):
    """Adds for coroutines that never block the event loop (an asyncio client, or a thread of
    the adapter's own that group-commits concurrent adds).

    Same arguments and answers as ``enqueue`` (FIFO queues take no priority), ``enqueue_dedup``
    and ``enqueue_delayed``. A handle's ``add_async`` uses these when the storage has them, and
    otherwise runs the blocking call on a small pool of the library's threads.
    """

    async def enqueue_async(self, item: Any, *priority: int) -> bool:
        """``enqueue`` for a coroutine."""
        ...

    async def enqueue_dedup_async(
        self, item: Any, job_id: str, priority: int | None = None
    ) -> bool:
        """``enqueue_dedup`` for a coroutine."""
        ...

    async def enqueue_delayed_async(
        self,
        item: Any,
        delay: float,
        job_id: str | None = None,
        priority: int | None = None,
    ) -> bool:
        """``enqueue_delayed`` for a coroutine."""
        ...


@runtime_checkable
class ILeaseReleasable(Protocol):
    """Handing a taken job back at once, without waiting for its lease to expire."""

    def release(self, ack_id: str) -> bool:
        """Give back the job leased under ``ack_id``, which was never started.

        In one atomic step the job goes back to its place in line, available at once (its
        priority, availability and order, as when its lease expires), and this delivery does
        not count: the next take reports the same attempt again. Distributed queues notify
        (``"enqueued"``). ``False`` when the lease is unknown, expired or taken over (fenced
        like ``acknowledge``). Works after ``close()``. The worker calls it for jobs it took
        ahead of a free slot (prefetch) when it stops, so another consumer gets them at once.
        """
        ...


@runtime_checkable
class IDelayedEnqueue(Protocol):
    """Jobs that become available only after a delay."""

    def enqueue_delayed(
        self,
        item: Any,
        delay: float,
        job_id: str | None = None,
        priority: int | None = None,
    ) -> bool:
        """Store ``item``; it is not handed out before ``delay`` seconds from now.

        Once due, it is handed out like any job of its priority, in order of due time among
        jobs that were delayed. With a ``job_id``, deduplicates like ``enqueue_dedup``.
        ``priority`` is ``None`` for FIFO queues.
        """
        ...


@runtime_checkable
class INackable(Protocol):
    """Giving a leased job back, to be handed out again after a delay."""

    def nack(self, ack_id: str, delay: float) -> bool:
        """Release the job leased under ``ack_id``; available again after ``delay`` seconds.

        The job keeps its priority and its delivery count (the next take counts one more).
        ``False`` when the lease is unknown, expired or taken over (a stale nack is refused
        like a stale ack).
        """
        ...


@runtime_checkable
class IDeadLetterable(Protocol):
    """A shelf of jobs that will not be retried, kept for inspection and recovery.

    Each dead letter is a :class:`DeadLetterRecord`; its ``key`` names it for
    ``requeue_dead``. Retention is bounded by the queue options ``dead_letter_limit`` and
    ``dead_letter_max_age``.
    """

    def dead_letter(self, ack_id: str, error: str) -> bool:
        """Move the job leased under ``ack_id`` to the dead letters, atomically.

        ``False`` when the lease is unknown, expired or taken over.
        """
        ...

    def dead_letters(self, limit: int = 100) -> list[DeadLetterRecord]:
        """Up to ``limit`` dead letters, oldest first (``limit=0``: none)."""
        ...

    def requeue_dead(self, keys: Sequence[str] | None = None) -> int:
        """Put dead letters back in line (all when ``keys`` is ``None``), attempts reset.

        Returns how many were requeued.
        """
        ...

    def purge_dead(self) -> int:
        """Delete every dead letter; returns how many."""
        ...


@runtime_checkable
class IQueueStats(Protocol):
    """Counts for operators, from the storage (every process), in one cheap call."""

    def stats(self) -> QueueStats:
        """Where this queue's jobs are; zeros when storage fails."""
        ...


@runtime_checkable
class IJobRecords(Protocol):
    """Records of jobs by id: their state, their outcome, and cancelling them (see "Job
    records" above). Implemented by queues whose storage can keep records; they are kept only
    when the queue is opened with ``keep_results`` above 0."""

    @property
    def keep_results(self) -> float:
        """Seconds an ended record is kept; ``0.0`` when this queue keeps no records."""
        ...

    def job_record(self, job_id: str) -> StoredJobRecord | None:
        """The record of ``job_id``; ``None`` when there is none (never added with records on,
        added without an id, or dropped after ``keep_results``). Answers whatever this object's
        own ``keep_results``."""
        ...

    def cancel(self, job_id: str) -> bool:
        """Cancel ``job_id``: a queued or delayed job is removed at once (``"cancelled"``), a
        running one is flagged (``cancel_requested``) for its consumer. Whether there was a job
        to cancel: ``False`` for an unknown id or an ended job."""
        ...

    def acknowledge_with_results(self, results: Sequence[tuple[str, Any]]) -> list[bool]:
        """Acknowledge each ``(ack_id, result)`` and record the job ``"succeeded"`` with
        ``result`` (bytes), in one atomic step; one answer per pair, as ``acknowledge_many``
        gives. Works after ``close()``."""
        ...

    def fail(self, ack_id: str, error: Any) -> bool:
        """End the job leased under ``ack_id`` for good: it leaves the queue (its id stays taken
        while the record is kept) and its record becomes ``"failed"`` with ``error`` (bytes),
        or ``"cancelled"`` when a cancel was requested; one atomic step. ``False`` when the
        lease is unknown, expired or taken over. Works after ``close()``."""
        ...

    def dead_letter_with_error(self, ack_id: str, error: str, record_error: Any) -> bool:
        """``dead_letter(ack_id, error)`` that also records ``record_error`` (bytes) as the
        error of the job's ``"dead"`` record, in the same atomic step."""
        ...

    def extend_lease_or_cancel(self, ack_id: str) -> LeaseAnswer:
        """``extend_lease`` that also says whether the job should stop: ``"held"`` (extended),
        ``"cancel"`` (extended, and a cancel was requested: stop the job and ``fail`` it) or
        ``"lost"`` (as ``extend_lease`` returning ``False``). Raises when the storage cannot
        answer, like ``extend_lease``."""


@runtime_checkable
class IJobProgress(Protocol):
    """Progress of running jobs, kept in their records (see "Job progress" above). Implemented
    by queues that implement :class:`IJobRecords`."""

    def set_progress(self, ack_id: str, progress: Any) -> bool:
        """Store ``progress`` (bytes; ``bytearray``, ``memoryview`` or ``str`` as for outcomes,
        else ``TypeError``) as the progress of the record of the job leased under ``ack_id``,
        changing nothing else. ``True``: stored; ``False``: nothing stored, the lease is
        unknown, expired or taken over, or the job has no record. Works after ``close()``."""
        ...


@runtime_checkable
class IRateLimited(Protocol):
    """A queue whose takes obey its ``rate_limit`` option (see "Rate limits" above)."""

    @property
    def rate_limit(self) -> tuple[int, float] | None:
        """``(count, seconds)``, or ``None`` when the queue has no limit."""
        ...

    def throttled_for(self) -> float:
        """Seconds until the window lets another job start, as the last take through this
        object saw it: ``0.0`` unless that take was cut short (or refused) by the limit."""
        ...


@runtime_checkable
class IStorageTopics(Protocol):
    """Topics whose bindings live in the storage: see "Topics" above. A store's ``topics()``
    returns one."""

    def publish(self, name: str, data: Any, *, message_id: str | None = None) -> int:
        """Store a copy of ``data`` in every bound queue whose pattern matches ``name``, in one
        atomic step; how many copies were stored (0 for a publish of a ``message_id`` kept
        from an earlier publish, see "Topics")."""
        ...

    def bind(self, pattern: str, queue: str) -> bool:
        """Route every publish matching ``pattern`` into the queue named ``queue``, for every
        process using this storage; whether the binding is new."""
        ...

    def unbind(self, pattern: str, queue: str) -> bool:
        """Remove that binding; whether there was one."""
        ...

    def bindings(self) -> list[tuple[str, str]]:
        """Every binding in the storage as ``(pattern, queue)``, sorted."""
        ...


@runtime_checkable
class ILiveSubscription(Protocol):
    """A live subscriber of storage topics (at-most-once): iterate it, sync or async, for
    messages with ``name``, ``data`` and ``message_id``; iteration ends after
    ``unsubscribe()`` once its buffer is empty."""

    @property
    def pattern(self) -> str:
        """The pattern it subscribed with."""
        ...

    @property
    def active(self) -> bool:
        """Whether it still receives publishes."""
        ...

    @property
    def dropped(self) -> int:
        """Messages its full buffer dropped (``on_full="drop_oldest"``/``"drop_newest"``)."""
        ...

    @property
    def missed(self) -> int:
        """An upper bound of the publishes it may have missed while disconnected (it may count
        publishes its pattern would not have matched)."""
        ...

    @property
    def reconnects(self) -> int:
        """How often it reconnected and subscribed again."""
        ...

    def get(self, timeout: float | None = None) -> Any | None:
        """The next message, waiting up to ``timeout`` seconds; ``None`` if none came."""
        ...

    def unsubscribe(self) -> bool:
        """Stop receiving; whether it was subscribed."""
        ...

    def __iter__(self) -> Any:
        """Itself: a sync iterator over its messages."""
        ...

    def __aiter__(self) -> Any:
        """Itself: an async iterator over its messages."""
        ...


@runtime_checkable
class IRecordSubscribable(Protocol):
    """Storage that tells subscribers when a job record ended, in any process."""

    def subscribe_records(self, callback: Callable[[str | None], None]) -> None:
        """Call ``callback(job_id)`` after the record of ``job_id`` reached an ended state
        (``"succeeded"``, ``"failed"``, ``"dead"``, ``"cancelled"``), through any object.

        Delivery may be lossy (Redis pub/sub is): waiters also read the record now and then,
        and a storage that knows it may have lost ends (a reconnection) calls
        ``callback(None)``: every waiter should read its record again. Subscriptions end when
        this object is closed.
        """


@runtime_checkable
class ILiveTopics(Protocol):
    """Storage topics with live subscribers in any process: see "Topics" above."""

    def subscribe(
        self,
        pattern: str,
        *,
        max_pending: int = 1000,
        on_full: str = "block",
        block_timeout: float | None = None,
    ) -> ILiveSubscription:
        """A live subscription to every name ``pattern`` matches, published by any process."""
        ...


class StoredWorkerRecord(TypedDict):
    """One worker's record as a store lists it (:meth:`IWorkerRegistry.worker_records`)."""

    #: The id the worker registered with.
    id: str
    #: The bytes it registered, as given (its JSON object: :mod:`varmq.contract.workers`).
    record: bytes
    #: Unix seconds on the store's clock: its first registration, and its latest one.
    started_at: float
    last_seen: float
    #: ``False`` once ``expires_after`` seconds passed on the store's clock since ``last_seen``.
    alive: bool


@runtime_checkable
class IWorkerRegistry(Protocol):
    """A store's records of the workers consuming its queues: see "Workers seen from anywhere"
    above."""

    def register_worker(self, worker_id: str, record: bytes, expires_after: float) -> None:
        """Store (or replace) the record of ``worker_id``, seen now; gone after
        ``expires_after`` seconds without another registration."""

    def remove_worker(self, worker_id: str) -> bool:
        """Delete the record of ``worker_id``; whether there was one."""
        ...

    def worker_records(self) -> list[StoredWorkerRecord]:
        """Every record kept: living workers, and gone ones for a while."""
        ...


@runtime_checkable
class IHasWorkerRegistry(Protocol):
    """A storage queue whose store keeps worker records."""

    @property
    def worker_registry(self) -> IWorkerRegistry:
        """The registry of the queue's store (the same object for every queue of it)."""
        ...
