"""Every SQL statement sqliteq runs: the one place its statements live.

No I/O here. Each statement is a named constant, or, where a batch is settled in one
statement, made from a constant template for a few batch sizes (:func:`acknowledge_leases`);
the comment above it names the index it relies on. Parameters are always bound, by name
(``:queue``, ``:now``) or by number (``?1``), never interpolated, so a queue name may be any
text.

Take order
    ``(priority, available_at, id)``. A plain enqueue's ``available_at`` is its enqueue time; a
    delayed or nacked job's is its due time, so once due it joins the end of its priority's
    line. A nack gives the row a new id (``max(id) + 1``), and a requeued dead letter is a new
    row: either goes behind every job already waiting at the same millisecond. Promotion keeps
    the id given when the job was delayed. An expired lease changes neither ``available_at``
    nor ``id``: the job keeps its place.

The schema those statements run on, and its migrations, are :mod:`sqliteq._schema`.
"""

from __future__ import annotations

import functools

__all__ = [
    "PRUNE_RATE_STARTS",
    "RATE_WINDOW",
    "RATE_WINDOW_LIVE",
    "RECORD_RATE_STARTS",
    "ACK_CHUNK",
    "ACK_DONE",
    "ADD_ERROR_RECORD",
    "ADD_RESULT_RECORD",
    "ADD_SUCCEEDED_RECORD",
    "acknowledge_leases",
    "padded_size",
    "ADD_DEAD",
    "ADD_DEAD_LETTER",
    "ADD_DONE",
    "BEGIN_IMMEDIATE",
    "BIND_TOPIC",
    "BUMP_ENQUEUED",
    "BUMP_ENQUEUED_BY",
    "CLAIM",
    "COMMIT",
    "CONVERT_WALL_LEASES",
    "CREDIT_STALLED_LEASES",
    "COUNT_TAKEABLE",
    "COUNT_WAITING",
    "DATA_VERSION",
    "DEAD_COUNT",
    "DEAD_LETTER",
    "DELETE_DEAD",
    "DELETE_DEAD_ALL",
    "DONE_COUNT",
    "ENQUEUE",
    "ENQUEUE_DEDUP",
    "ENQUEUE_DELAYED",
    "EXPIRE_FOREIGN_LEASES",
    "EXTEND_LEASE",
    "INTEGRITY_CHECK",
    "JOB_ID_STORED",
    "LIST_DEAD",
    "HAS_QUEUE_SETTINGS",
    "KEEP_MESSAGE_ID",
    "LIST_QUEUES",
    "MESSAGE_ID_KEPT",
    "NACK",
    "PROMOTE_DUE",
    "PRUNE_MESSAGE_IDS",
    "PRUNE_DEAD_BY_AGE",
    "PRUNE_DEAD_OLDEST",
    "PRUNE_DONE_BY_AGE",
    "PRUNE_DONE_OLDEST",
    "PURGE_TAKEABLE",
    "QUEUE_COUNTER",
    "QUEUE_COUNTERS",
    "OFFER_QUEUE_SETTINGS",
    "QUEUE_KIND",
    "QUEUE_SETTINGS",
    "QUICK_CHECK",
    "READ_APPLICATION_ID",
    "READ_USER_VERSION",
    "READ_LEASE_CLOCK",
    "READ_SYNCHRONOUS",
    "REGISTER_QUEUE",
    "RELEASE",
    "SCHEDULE_MARK",
    "SET_SCHEDULE_MARK",
    "REQUEUE_DEAD",
    "ROLLBACK",
    "SET_APPLICATION_ID",
    "SET_JOURNAL_WAL",
    "SET_LEASE_CLOCK",
    "SET_QUERY_ONLY",
    "SET_STALL_CREDITED",
    "SET_BUSY_TIMEOUT",
    "SET_SYNCHRONOUS",
    "SET_WAL_AUTOCHECKPOINT",
    "SET_TEMP_STORE_MEMORY",
    "SET_USER_VERSION",
    "STATS",
    "SYNCHRONOUS_LEVELS",
    "TABLE_NAMES",
    "TAKE_DELETE",
    "TAKE_DONE",
    "TOPIC_BINDINGS",
    "UNBIND_TOPIC",
    "VALUES_TAKEABLE",
    "ADD_ENDS",
    "CANCEL_JOB",
    "ENDED_COUNT",
    "ENDS_SINCE",
    "FLAG_CANCEL",
    "PRUNE_RECORDS_BY_AGE",
    "PRUNE_RECORDS_OLDEST",
    "QUEUE_ENDS",
    "READ_RECORD",
    "SETTLE_CANCELLED",
    "SETTLE_FAILED",
    "SET_PROGRESS",
    "SET_RECORD_PROGRESS",
    "SWEEP_CANCELLED",
    "TAKE_DEAD_RECORD",
]

# --- file identity (read before anything is written) -----------------------------------------

READ_APPLICATION_ID = "PRAGMA application_id"
READ_USER_VERSION = "PRAGMA user_version"
# PRAGMA values cannot be bound; both are formatted from integers only.
SET_APPLICATION_ID = "PRAGMA application_id = {value:d}"
SET_USER_VERSION = "PRAGMA user_version = {value:d}"
# sqlite_master is scanned; it is tiny. Views count: a file holding only a view is another
# application's content, not an empty database.
TABLE_NAMES = "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
# Changes whenever another connection (any process) commits; costs no page read.
DATA_VERSION = "PRAGMA data_version"

# --- the lease clock (version 4) -------------------------------------------------------------

# host primary key (one row).
READ_LEASE_CLOCK = "SELECT lease_clock, stall_credited_until FROM host WHERE id = 1"
# host primary key.
SET_LEASE_CLOCK = "UPDATE host SET lease_clock = :identity, stall_credited_until = 0 WHERE id = 1"
# Full scan of the leased jobs (no index by state alone; run once, when the lease clock of the
# file changes): wall-clock deadlines become lease-clock ones with the same time left.
CONVERT_WALL_LEASES = """
UPDATE jobs SET lease_until = lease_until - :now + :lease_now WHERE state = 'leased'"""
# Same scan: leases of another boot (or clock) have run out.
EXPIRE_FOREIGN_LEASES = "UPDATE jobs SET lease_until = :lease_now WHERE state = 'leased'"
# Full scan of the leased jobs, run only after a transaction waited a long time for the write
# lock: the leases alive when the wait began get the part of the wait no earlier credit gave.
# Nobody could renew a lease while the file was locked, so nobody may take it over for that.
CREDIT_STALLED_LEASES = """
UPDATE jobs SET lease_until = lease_until + :credit
WHERE state = 'leased' AND lease_until > :since"""
# host primary key.
SET_STALL_CREDITED = "UPDATE host SET stall_credited_until = :until WHERE id = 1"

BEGIN_IMMEDIATE = "BEGIN IMMEDIATE"
# A read transaction (deferred): the checks before opening see one snapshot.
BEGIN_READ = "BEGIN"
COMMIT = "COMMIT"
ROLLBACK = "ROLLBACK"

# --- queues ------------------------------------------------------------------------------------

# queues primary key.
REGISTER_QUEUE = "INSERT OR IGNORE INTO queues (name, kind) VALUES (:queue, :kind)"
# queues primary key.
QUEUE_KIND = "SELECT kind FROM queues WHERE name = :queue"
# queues primary key.
BUMP_ENQUEUED = "UPDATE queues SET enqueued = enqueued + 1 WHERE name = :queue"
# queues primary key: once per queue for the :count ready jobs one group of adds stored.
BUMP_ENQUEUED_BY = "UPDATE queues SET enqueued = enqueued + :count WHERE name = :queue"
# queues primary key.
QUEUE_COUNTER = "SELECT enqueued FROM queues WHERE name = :queue"
# Full scan of queues: one row per queue name, read only after data_version changed.
QUEUE_COUNTERS = "SELECT name, enqueued FROM queues"
# queues primary key (its automatic index), in name order; one row per queue name.
LIST_QUEUES = "SELECT name, kind FROM queues ORDER BY name"
# queue_settings primary key: the first opener's settings stay (stored_settings).
OFFER_QUEUE_SETTINGS = """
INSERT OR IGNORE INTO queue_settings (queue, settings) VALUES (:queue, :settings)"""
# queue_settings primary key.
QUEUE_SETTINGS = "SELECT settings FROM queue_settings WHERE queue = :queue"
# sqlite_master is scanned; it is tiny. A file no new_* opener wrote to has no such table.
HAS_QUEUE_SETTINGS = """
SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'queue_settings'"""

# --- schedule marks -------------------------------------------------------------------------

# schedule_marks primary key.
SCHEDULE_MARK = """
SELECT occurrence_ms FROM schedule_marks WHERE queue = :queue AND schedule = :schedule"""
# schedule_marks primary key: the mark only moves forward.
SET_SCHEDULE_MARK = """
INSERT INTO schedule_marks (queue, schedule, occurrence_ms)
VALUES (:queue, :schedule, :occurrence_ms)
ON CONFLICT (queue, schedule) DO UPDATE SET
    occurrence_ms = max(occurrence_ms, excluded.occurrence_ms)"""

# --- topic message ids ---------------------------------------------------------------------

# topic_message_ids_expiry: at most 100 expired ids per publish, soonest first, so one publish
# never pays for a day's worth at once.
PRUNE_MESSAGE_IDS = """
DELETE FROM topic_message_ids WHERE message_id IN (
    SELECT message_id FROM topic_message_ids WHERE expires_at <= :now
    ORDER BY expires_at LIMIT 100
)"""
# topic_message_ids primary key.
MESSAGE_ID_KEPT = """
SELECT 1 FROM topic_message_ids WHERE message_id = :message_id AND expires_at > :now"""
# topic_message_ids primary key: an expired row not pruned yet is replaced.
KEEP_MESSAGE_ID = """
INSERT OR REPLACE INTO topic_message_ids (message_id, expires_at) VALUES (:message_id, :until)"""

# --- jobs --------------------------------------------------------------------------------------

# No index read: a plain insert (jobs_dedup is maintained, not consulted).
ENQUEUE = """
INSERT INTO jobs (queue, priority, data, state, attempts, enqueued_at, available_at)
VALUES (:queue, :priority, :data, 'ready', 0, :now, :now)"""

# A kept record holds its job id (version 6): the job_records primary key, one probe.
_NO_KEPT_RECORD = """
NOT EXISTS (
    SELECT 1 FROM job_records WHERE queue = :queue AND job_id = :job_id
    AND (expires_at IS NULL OR expires_at > :now)
)"""

# jobs_dedup: the insert is ignored while a stored job of this queue has the same job_id;
# the job_records primary key: nothing is inserted while a kept record holds it.
ENQUEUE_DEDUP = f"""
INSERT OR IGNORE INTO jobs
    (queue, priority, data, job_id, state, attempts, enqueued_at, available_at, keep_ms)
SELECT :queue, :priority, :data, :job_id, 'ready', 0, :now, :now, :keep_ms
WHERE {_NO_KEPT_RECORD}"""

# jobs_dedup and the job_records primary key when :job_id is not NULL (ignored while the id is
# held); else a plain insert.
ENQUEUE_DELAYED = f"""
INSERT OR IGNORE INTO jobs
    (queue, priority, data, job_id, state, attempts, enqueued_at, available_at, keep_ms)
SELECT :queue, :priority, :data, :job_id, 'delayed', 0, :now, :now + :delay_ms, :keep_ms
WHERE {_NO_KEPT_RECORD}"""

# jobs_delayed, the due range from its start: due delayed jobs join the line at their due time
# (available_at and id unchanged). Runs first in every take, dequeue and purge.
PROMOTE_DUE = """
UPDATE jobs SET state = 'ready'
WHERE queue = :queue AND state = 'delayed' AND available_at <= :now"""

# The takeable test; the literal "state IN ('ready', 'leased')" lets the planner use the
# partial jobs_line. Ready rows are available (due delayed jobs were promoted first). A run-out
# lease whose cancel was requested is not takeable (version 6; jobs_line holds cancel too).
_TAKEABLE = """
queue = :queue AND state IN ('ready', 'leased')
AND (state = 'ready' OR (lease_until <= :lease_now AND cancel = 0))"""

# What a read counts as waiting without promoting: due delayed jobs (jobs_delayed, a range).
_DUE_DELAYED = "queue = :queue AND state = 'delayed' AND available_at <= :now"

# jobs_line, walked in take order: up to :n takeable jobs get a fresh lease token. A take
# starts without progress (version 7).
# RETURNING order is unspecified; the caller sorts by (priority, available_at, id).
CLAIM = f"""
UPDATE jobs
SET state = 'leased',
    lease_token = lower(hex(randomblob(16))),
    lease_until = :lease_now + :lease_ms,
    attempts = attempts + 1,
    started_at = :now,
    progress = NULL
WHERE id IN (
    SELECT id FROM jobs WHERE {_TAKEABLE} ORDER BY priority, available_at, id LIMIT :n
)
RETURNING id, priority, available_at, data, lease_token, attempts"""

# jobs_line: the first takeable job, removed without a lease (remove_on_complete=True).
TAKE_DELETE = f"""
DELETE FROM jobs
WHERE id = (SELECT id FROM jobs WHERE {_TAKEABLE} ORDER BY priority, available_at, id LIMIT 1)
RETURNING data, job_id, attempts + 1, keep_ms, enqueued_at"""

# jobs_line: the first takeable job, kept as done without a lease (remove_on_complete=False).
TAKE_DONE = f"""
UPDATE jobs
SET state = 'done', lease_token = NULL, lease_until = NULL,
    attempts = attempts + 1, finished_at = :now
WHERE id = (SELECT id FROM jobs WHERE {_TAKEABLE} ORDER BY priority, available_at, id LIMIT 1)
RETURNING data, job_id, attempts, keep_ms, enqueued_at"""

# jobs_lease. A lease that has run out is refused even before another take replaced its token.
_LIVE_LEASE = """
lease_token = :token AND queue = :queue AND state = 'leased' AND lease_until > :lease_now"""

# What a settle that ends a job returns, for its record (version 6; progress: version 7).
_SETTLED = "RETURNING job_id, attempts, started_at, cancel, keep_ms, enqueued_at, progress"

# jobs_lease: a job that failed for good (``fail``) leaves the queue.
SETTLE_FAILED = f"DELETE FROM jobs WHERE {_LIVE_LEASE} {_SETTLED}"

# jobs_lease. With remove_on_complete=False the job is kept as done. One statement a token:
# RETURNING sees the row as the UPDATE left it, without its token.
ACK_DONE = f"""
UPDATE jobs SET state = 'done', lease_token = NULL, lease_until = NULL, finished_at = :now
WHERE {_LIVE_LEASE} {_SETTLED}"""

ACK_CHUNK = 32
"""The most lease tokens one acknowledgement statement settles."""

# jobs_lease, one probe per token: the jobs leased under any of the tokens ?3, ?4, ... of queue
# ?1, with leases alive at ?2 (lease clock), leave the queue (remove_on_complete, the default).
# One statement for a batch instead of one per token: a statement costs the sqlite3 module a
# call, a binding and a step (the GIL let go and taken back) whatever it does. RETURNING gives
# the token with what _SETTLED gives, so each id's answer is found whatever the order of the
# rows. The statement comes in a few sizes (padded_size), which the connection's statement cache
# keeps prepared.
_ACK_LEASES = """
DELETE FROM jobs
WHERE lease_token IN ({tokens}) AND queue = ?1 AND state = 'leased' AND lease_until > ?2
RETURNING lease_token, job_id, attempts, started_at, cancel, keep_ms, enqueued_at, progress"""


@functools.cache
def acknowledge_leases(tokens: int) -> str:
    """The acknowledgement of ``tokens`` lease tokens (a size :func:`padded_size` gives):
    parameters ``(queue, lease_now, *tokens)``."""
    return _ACK_LEASES.format(tokens=", ".join(f"?{3 + i}" for i in range(tokens)))


def padded_size(count: int) -> int:
    """The statement size for ``count`` (1 to :data:`ACK_CHUNK`) lease tokens: the next power of
    two; the caller repeats a token to fill it (``IN`` finds it once)."""
    return 1 << (count - 1).bit_length()


# jobs_lease.
EXTEND_LEASE = f"""
UPDATE jobs SET lease_until = :lease_now + :lease_ms WHERE {_LIVE_LEASE} RETURNING cancel"""

# jobs_lease (version 7): the progress of a job with a record (keep_ms set), under its live
# lease; nothing else of the row changes. rowcount 0: lease lost, or no record.
SET_PROGRESS = f"""
UPDATE jobs SET progress = :progress WHERE {_LIVE_LEASE} AND keep_ms IS NOT NULL"""

# jobs_lease: a lease given back (nack, release, dead letter) whose cancel was requested ends
# the job instead (version 6); RELEASE, NACK and DEAD_LETTER leave such a row alone.
SETTLE_CANCELLED = f"DELETE FROM jobs WHERE {_LIVE_LEASE} AND cancel = 1 {_SETTLED}"

# jobs_cancel, a range from the start: flagged jobs whose consumer let the lease run out end
# cancelled. Run first in every take, cancel and job_record that finds one.
SWEEP_CANCELLED = """
DELETE FROM jobs WHERE queue = :queue AND cancel = 1 AND lease_until <= :lease_now
AND state = 'leased'
RETURNING job_id, attempts, started_at, cancel, keep_ms, enqueued_at, progress"""

# jobs_lease. The job goes back to the place it had (priority, available_at and id unchanged,
# as when its lease expires), ready now, and this delivery is not counted. Only the current,
# unexpired lease may release. The caller bumps the enqueue counter in the same transaction.
RELEASE = f"""
UPDATE jobs
SET state = 'ready', lease_token = NULL, lease_until = NULL, attempts = max(attempts - 1, 0)
WHERE {_LIVE_LEASE} AND cancel = 0"""

# jobs_lease for the row; the rowid b-tree for max(id). The job gets a new id, larger than
# every stored row's, so it goes behind the jobs already waiting even at the same millisecond;
# it keeps its priority and attempts. :delay_ms > 0 makes it delayed, else ready now.
NACK = f"""
UPDATE jobs
SET id = (SELECT max(id) FROM jobs) + 1,
    state = CASE WHEN :delay_ms > 0 THEN 'delayed' ELSE 'ready' END,
    lease_token = NULL, lease_until = NULL,
    available_at = :now + :delay_ms
WHERE {_LIVE_LEASE} AND cancel = 0"""

# jobs_line and jobs_delayed, two ranges (covering: no table row is read).
COUNT_TAKEABLE = f"""
SELECT (SELECT count(*) FROM jobs WHERE {_TAKEABLE})
     + (SELECT count(*) FROM jobs WHERE {_DUE_DELAYED})"""

# queues primary key for the ready jobs; jobs_expiry for the expired leases and jobs_delayed
# for the due delayed jobs, ranges stopping after :capacity. What a take would get, as
# COUNT_TAKEABLE counts it.
COUNT_WAITING = """
SELECT (SELECT ready FROM queues WHERE name = :queue) + (
    SELECT count(*) FROM (
        SELECT 1 FROM jobs WHERE queue = :queue AND state = 'leased' AND lease_until <= :lease_now
        LIMIT :capacity
    )
) + (
    SELECT count(*) FROM (
        SELECT 1 FROM jobs WHERE queue = :queue AND state = 'delayed' AND available_at <= :now
        LIMIT :capacity
    )
)"""

# jobs_dedup: whether a stored (not done) job of this queue has this job_id, or
# the job_records primary key: a kept record holds it.
JOB_ID_STORED = f"""
SELECT EXISTS (
    SELECT 1 FROM jobs WHERE queue = :queue AND job_id = :job_id AND state <> 'done'
) OR NOT {_NO_KEPT_RECORD}"""

# jobs_line and jobs_delayed, merged and sorted in take order.
VALUES_TAKEABLE = f"""
SELECT data FROM (
    SELECT priority, available_at, id, data FROM jobs WHERE {_TAKEABLE}
    UNION ALL
    SELECT priority, available_at, id, data FROM jobs WHERE {_DUE_DELAYED}
)
ORDER BY priority, available_at, id"""

# jobs_line. Leased jobs stay, so that their workers can still acknowledge them; run after
# PROMOTE_DUE, so due delayed jobs go too and the others stay delayed.
PURGE_TAKEABLE = f"DELETE FROM jobs WHERE {_TAKEABLE} {_SETTLED}"

# queues primary key.
DONE_COUNT = "SELECT done FROM queues WHERE name = :queue"
# queues primary key.
ADD_DONE = "UPDATE queues SET done = done + :delta WHERE name = :queue"

# jobs_done, a range from the oldest: completed jobs finished before :cutoff.
PRUNE_DONE_BY_AGE = """
DELETE FROM jobs WHERE queue = :queue AND state = 'done' AND finished_at < :cutoff"""

# jobs_done, from the oldest: the :excess oldest completed jobs.
PRUNE_DONE_OLDEST = """
DELETE FROM jobs WHERE id IN (
    SELECT id FROM jobs WHERE queue = :queue AND state = 'done'
    ORDER BY finished_at, id LIMIT :excess
)"""

# One statement, so one snapshot. Each part reads one index range, covering (no table row):
# the line part jobs_line (the queue's ready and leased jobs), the delayed part jobs_delayed
# (the queue's delayed jobs), dead the queues primary key. Times in ms; NULL minima: none.
STATS = """
SELECT line.waiting, line.in_flight, line.oldest,
       delayed.due, delayed.later, delayed.oldest,
       (SELECT dead FROM queues WHERE name = :queue)
FROM (
    SELECT total(state = 'ready' OR (lease_until <= :lease_now AND cancel = 0)) AS waiting,
           total(state = 'leased' AND lease_until > :lease_now) AS in_flight,
           min(CASE WHEN state = 'ready' OR (lease_until <= :lease_now AND cancel = 0)
               THEN available_at END) AS oldest
    FROM jobs WHERE queue = :queue AND state IN ('ready', 'leased')
) AS line, (
    SELECT total(available_at <= :now) AS due,
           total(available_at > :now) AS later,
           min(CASE WHEN available_at <= :now THEN available_at END) AS oldest
    FROM jobs WHERE queue = :queue AND state = 'delayed'
) AS delayed"""

# --- dead letters --------------------------------------------------------------------------------

# jobs_lease: the leased job leaves the queue; the caller shelves what it returns.
DEAD_LETTER = f"""
DELETE FROM jobs WHERE {_LIVE_LEASE} AND cancel = 0
RETURNING priority, data, job_id, attempts, started_at, keep_ms, enqueued_at, progress"""

# No index read: a plain insert.
ADD_DEAD_LETTER = """
INSERT INTO dead_letters (queue, priority, data, job_id, attempts, error, dead_at)
VALUES (:queue, :priority, :data, :job_id, :attempts, :error, :now)"""

# queues primary key.
DEAD_COUNT = "SELECT dead FROM queues WHERE name = :queue"
# queues primary key.
ADD_DEAD = "UPDATE queues SET dead = dead + :delta WHERE name = :queue"

# dead_letters_age, a range from the oldest: dead letters shelved before :cutoff.
PRUNE_DEAD_BY_AGE = "DELETE FROM dead_letters WHERE queue = :queue AND dead_at < :cutoff"

# dead_letters_age, from the oldest: the :excess oldest dead letters.
PRUNE_DEAD_OLDEST = """
DELETE FROM dead_letters WHERE id IN (
    SELECT id FROM dead_letters WHERE queue = :queue ORDER BY dead_at, id LIMIT :excess
)"""

# dead_letters_age, oldest first.
LIST_DEAD = """
SELECT id, data, attempts, error, dead_at FROM dead_letters
WHERE queue = :queue ORDER BY dead_at, id LIMIT :limit"""

# dead_letters primary key; the queue is checked, so a key of another queue is unknown here.
DELETE_DEAD = """
DELETE FROM dead_letters WHERE id = :key AND queue = :queue
RETURNING id, dead_at, priority, data, job_id"""

# dead_letters_age: every dead letter of the queue (the caller sorts, oldest first).
DELETE_DEAD_ALL = """
DELETE FROM dead_letters WHERE queue = :queue
RETURNING id, dead_at, priority, data, job_id"""

# jobs_dedup for the test: the job gets its job id back unless a stored job holds it
# meanwhile (then it is stored without one). A new row: end of its priority's line, now.
REQUEUE_DEAD = """
INSERT INTO jobs
    (queue, priority, data, job_id, state, attempts, enqueued_at, available_at, keep_ms)
VALUES (
    :queue, :priority, :data,
    CASE WHEN EXISTS (
        SELECT 1 FROM jobs WHERE queue = :queue AND job_id = :job_id AND state <> 'done'
    ) THEN NULL ELSE :job_id END,
    'ready', 0, :now, :now,
    CASE WHEN EXISTS (
        SELECT 1 FROM jobs WHERE queue = :queue AND job_id = :job_id AND state <> 'done'
    ) THEN NULL ELSE :keep_ms END
)"""

# --- connection settings ---------------------------------------------------------------------

# Persistent in the file; only ever run on a file already known to be ours or empty.
SET_JOURNAL_WAL = "PRAGMA journal_mode = WAL"
# Per connection, in integer milliseconds; formatted from an int only.
SET_BUSY_TIMEOUT = "PRAGMA busy_timeout = {ms:d}"
# Per connection; the value is checked against SYNCHRONOUS_LEVELS before formatting.
SET_SYNCHRONOUS = "PRAGMA synchronous = {level}"
READ_SYNCHRONOUS = "PRAGMA synchronous"
SET_WAL_AUTOCHECKPOINT = "PRAGMA wal_autocheckpoint = {pages:d}"
SYNCHRONOUS_LEVELS = frozenset({"OFF", "NORMAL", "FULL", "EXTRA"})
# Per connection. The claim's "id IN (subquery)" builds a small ephemeral table; in the default
# temp store each one opens a temporary file, which made a take ten times slower.
SET_TEMP_STORE_MEMORY = "PRAGMA temp_store = MEMORY"
# The read connection and the watcher's connection only read.
SET_QUERY_ONLY = "PRAGMA query_only = ON"
# Reads every page once; the last step of deciding that a file is safe to open (large files).
QUICK_CHECK = "PRAGMA quick_check"
# Also checks that every index matches its table; for files up to INTEGRITY_CHECK_MAX_BYTES.
INTEGRITY_CHECK = "PRAGMA integrity_check"

# --- topics: bindings (schema version 5) and publishing ----------------------------------------

# topic_bindings primary key: ignored when the binding exists (rowcount 0).
BIND_TOPIC = "INSERT OR IGNORE INTO topic_bindings (pattern, queue) VALUES (:pattern, :queue)"
# topic_bindings primary key.
UNBIND_TOPIC = "DELETE FROM topic_bindings WHERE pattern = :pattern AND queue = :queue"
# Full scan of topic_bindings (its primary key order): one row per binding.
TOPIC_BINDINGS = "SELECT pattern, queue FROM topic_bindings ORDER BY pattern, queue"
# A copy of a publish: ENQUEUE, or ENQUEUE_DEDUP when the copy has a job id (REGISTER_QUEUE
# first makes a queue never opened a FIFO queue; BUMP_ENQUEUED announces a stored copy).

# --- job records (schema version 6; progress: version 7) --------------------------------------

# jobs_dedup for a stored job with a record (keep_ms set), the job_records primary key for an
# ended record: one statement, so one snapshot of both; the stored job first. Columns: rank, state,
# enqueued_at, attempts, started_at, finished_at, expires_at, cancel, result, error, then the
# job's row id, state, available_at and lease_until (NULL for an ended record), then progress.
READ_RECORD = """
SELECT 0, 'live', enqueued_at, attempts, started_at, NULL, NULL, cancel, NULL, NULL,
       id, state, available_at, lease_until, progress
FROM jobs
WHERE queue = :queue AND job_id = :job_id AND state <> 'done' AND keep_ms IS NOT NULL
UNION ALL
SELECT 1, state, enqueued_at, attempts, started_at, finished_at, expires_at, cancel_requested,
       result, error, NULL, NULL, NULL, NULL, progress
FROM job_records WHERE queue = :queue AND job_id = :job_id
ORDER BY 1"""

# The job_records primary key: the ended record of a job, for executemany over a batch. OR
# REPLACE: a record of the id whose time is up but that was not dropped yet (a kept one holds the
# id, so it is never replaced). Bound by number: ?1 queue, ?2 job_id, ?3 keep_ms, ?4 enqueued_at,
# ?5 attempts, ?6 started_at, ?7 finished_at (now), ?8 ended_seq, ?9 cancel_requested, then what
# the kind of end varies. The expiry is computed here, and what a kind of end always writes is a
# literal: every bound value costs the sqlite3 module a conversion, and a None or a bytes value
# also a failed adapter lookup (on CPython 3.11 an AttributeError formatted and cleared, about
# 0.35 us each), so an acknowledgement binds no None, and the outcome's bytes go as a
# bytearray, bound as it is.
_ADD_RECORD = """
INSERT OR REPLACE INTO job_records
    (queue, job_id, keep_ms, enqueued_at, attempts, started_at, finished_at, expires_at,
     ended_seq, cancel_requested, state, result, error)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7 + ?3, ?8, ?9, {outcome})"""

# Succeeded with a result worker's value (?10).
ADD_RESULT_RECORD = _ADD_RECORD.format(outcome="'succeeded', ?10, NULL")
# Succeeded without a value (an acknowledgement without one, a take for good).
ADD_SUCCEEDED_RECORD = _ADD_RECORD.format(outcome="'succeeded', NULL, NULL")
# Failed, dead or cancelled (?11), with its error or None (?10).
ADD_ERROR_RECORD = _ADD_RECORD.format(outcome="?11, NULL, ?10")

# The job_records primary key (version 7): the last progress of an ended job, written after its
# record by the transaction that ended it, for the few ends that have one (so that the others
# bind no None: see _ADD_RECORD). Bound by number: ?1 queue, ?2 job_id, ?3 progress.
SET_RECORD_PROGRESS = "UPDATE job_records SET progress = ?3 WHERE queue = ?1 AND job_id = ?2"

# The job_records primary key: a requeued dead letter takes its own kept "dead" record back (the
# record is its job's row again, with the record's keep_ms).
TAKE_DEAD_RECORD = """
DELETE FROM job_records
WHERE queue = :queue AND job_id = :job_id AND state = 'dead' AND expires_at > :now
RETURNING keep_ms"""

# jobs primary key: a queued or delayed job cancelled, out of the queue.
CANCEL_JOB = f"DELETE FROM jobs WHERE id = :id {_SETTLED}"

# jobs primary key: a running job's cancel is requested; its consumer hears it at renewal.
FLAG_CANCEL = "UPDATE jobs SET cancel = 1 WHERE id = :id"

# queues primary key.
ENDED_COUNT = "SELECT ended FROM queues WHERE name = :queue"
# queues primary key: numbers :count ends at once; they are ended - :count + 1 .. ended.
ADD_ENDS = "UPDATE queues SET ended = ended + :count WHERE name = :queue RETURNING ended"
# Full scan of queues: one row per queue name, read by the watcher after data_version changed.
QUEUE_ENDS = "SELECT name, ended FROM queues"

# job_records_ended, a range after :seen: the ends the watcher has not told yet.
ENDS_SINCE = """
SELECT job_id, ended_seq FROM job_records
WHERE queue = :queue AND ended_seq > :seen ORDER BY ended_seq LIMIT :limit"""


# job_records_ended, the :scan records that ended first (covering): those of them whose time is
# up (:cutoff is the first millisecond a record is still kept at: now + 1). Records end in order
# and most share one keep_results, so the expired ones are at the start; one kept longer can
# hold a shorter-lived one behind it for a while (it is not read meanwhile, and the limit still
# bounds them all).
PRUNE_RECORDS_BY_AGE = """
DELETE FROM job_records WHERE queue = :queue AND job_id IN (
    SELECT job_id FROM (
        SELECT job_id, expires_at FROM job_records WHERE queue = :queue
        ORDER BY ended_seq LIMIT :scan
    ) WHERE expires_at < :cutoff
)"""

# job_records_ended, a range from the start: the records of all but the last :limit ends.
PRUNE_RECORDS_OLDEST = """
DELETE FROM job_records WHERE queue = :queue AND ended_seq <= :upto"""

# --- rate limits (sqliteq._rates): the starts of a limited queue's window ---------------------

# Starts that left the window, and rows of another boot (later than the lease clock's now).
PRUNE_RATE_STARTS = """
DELETE FROM rate_starts
WHERE queue = :queue AND (at <= :lease_now - :window_ms OR at > :lease_now)"""

# The starts in the window (after PRUNE_RATE_STARTS), and the oldest one's time.
RATE_WINDOW = "SELECT sum(n), min(at) FROM rate_starts WHERE queue = :queue"

# The starts in the window without pruning (stats reads on the read connection).
RATE_WINDOW_LIVE = """
SELECT sum(n) FROM rate_starts
WHERE queue = :queue AND at > :lease_now - :window_ms AND at <= :lease_now"""

RECORD_RATE_STARTS = "INSERT INTO rate_starts (queue, at, n) VALUES (:queue, :lease_now, :n)"
