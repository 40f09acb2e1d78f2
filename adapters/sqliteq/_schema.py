"""The schema of a sqliteq file and its migrations, in order: the tables every statement of
:mod:`sqliteq._sql` runs on.

A file carries its schema version in ``PRAGMA user_version`` and its kind in
``PRAGMA application_id``; opening a file (:mod:`sqliteq._open`) brings an older version up
to :data:`SCHEMA_VERSION` with :data:`MIGRATIONS`, one transaction per version. No I/O here.

Layout (schema version 7)
    ``queues``  one row per queue name: its kind (``fifo`` or ``priority``); ``enqueued``, a
                counter bumped in every enqueue transaction (the watcher thread compares it to
                tell subscribers that a job was added); ``done``, how many completed jobs of
                the queue are kept (remove_on_complete=False), so retention needs no count;
                ``ready`` (version 2), how many jobs of the queue are in state ``ready``, kept
                by triggers so that a capacity check needs no count over the backlog (the
                triggers exist once a capacity was set on the file; see INSTALL_CAPACITY).
                ``dead`` (version 3), how many dead letters the queue has, so that retention
                and ``stats()`` need no count.
    ``jobs``    one row per job of every queue. ``state`` is ``ready``, ``delayed`` (version 3),
                ``leased`` or ``done``. A job is *takeable* when it is ready, or leased with
                ``lease_until <= lease_now`` (an expired lease); a delayed job becomes ready once
                ``available_at <= now``: every take, ``dequeue`` and ``purge`` first promotes
                the queue's due delayed jobs (PROMOTE_DUE), and reads (``len``, ``values``,
                ``stats``) count a due delayed job as waiting. Times are integer milliseconds:
                ``lease_until`` on the lease clock (``:lease_now``; version 4: the host's
                boot-time clock, see ``host``), the others on the wall clock (``:now``).
                ``id`` is the rowid: a new row always gets an id larger than every stored row
                (no AUTOINCREMENT table).
    ``dead_letters`` (version 3) one row per dead letter: the job's queue, priority, data,
                job_id and attempts, the error text and ``dead_at`` (adapter clock, ms). Its
                ``id`` (AUTOINCREMENT, never reused) is the dead letter's key.
    ``host``    (version 4) one row: which clock ``lease_until`` is on, and the end of the last
                write-lock stall given back to the leases.
    ``topic_bindings`` (version 5) one row per ``(pattern, queue)`` binding of the file's topics.
    ``job_records`` (version 6) one row per *ended* job record, with its outcome. While the
                job is stored its record is its own row: ``jobs.keep_ms`` is set (the
                ``keep_results`` of the object that added it, in ms) for a job added with an id
                through an object opened with ``keep_results``, and its queued, delayed or
                running state is read from the row, which time alone changes.
                ``jobs.started_at`` is the last take, ``jobs.cancel`` is 1 once a cancel was
                requested while it ran. ``queues.ended`` is bumped at every end and
                ``ended_seq`` numbers the ends in order: the watcher reads the ends after the
                last it told, and ``keep_results_limit`` keeps the records of the last ends.
                ``progress`` (version 7, on ``jobs`` and ``job_records``): the bytes of the
                last ``set_progress`` of the job's current take (every take clears it), carried
                into its ended record by the settle that ends it.
    ``queue_settings`` (no version: created by the first ``new_*`` opener that finds it
                missing, see CREATE_QUEUE_SETTINGS) one row per queue whose settings were
                stored: the defining options of its first opener, as JSON
                (:mod:`varmq.contract.stored_settings`).
    ``schedule_marks`` (no version either: made by the first schedule occurrence added) one
                row per (queue, schedule): the latest occurrence added, so that an occurrence
                runs once whatever record pruning does.
    ``topic_message_ids`` (no version either: made by the first publish that keeps a message
                id) one row per published topic ``message_id`` kept for dedup, until
                ``expires_at`` (wall ms).
    ``rate_starts`` (no version either: made by the first take of a queue with a
                ``rate_limit``) one row per take that leased jobs from such a queue: when (lease
                clock ms) and how many, kept for the limit's window.

Invariants
    - ``lease_token`` is set exactly while ``state = 'leased'``; a take always writes a fresh one,
      so an older token never matches again (fencing).
    - A take never changes ``priority``, ``available_at`` or ``id``: an expired job keeps its
      place in line.
    - A job id (dedup) is held by a ready, delayed or leased row, and by a kept record (version
      6; an ended record past its ``expires_at`` no longer holds it); done rows and dead letters
      do not hold it.
    - Every statement that takes a job with ``keep_ms`` out of the queue adds its ended record
      in the same transaction (the settles return what the record needs).
    - A leased row with ``cancel = 1`` whose lease ran out is never takeable: it is ended
      ``cancelled`` by the next write that sweeps the queue (SWEEP_CANCELLED).
    - ``enqueued`` of a queue only grows.
    - ``done`` of a queue equals its number of rows with ``state = 'done'``; ``dead`` equals
      its number of dead letters.
    - Once INSTALL_CAPACITY ran on a file, ``ready`` of a queue equals its number of rows
      with ``state = 'ready'``: its triggers keep it in the statement that changes the row,
      for every connection.
"""

from __future__ import annotations

__all__ = [
    "APPLICATION_ID",
    "CAPACITY_INSTALLED",
    "CHECK_REWRITES",
    "CREATE_QUEUE_SETTINGS",
    "CREATE_RATE_STARTS",
    "CREATE_RATE_STARTS_BY_QUEUE",
    "CREATE_SCHEDULE_MARKS",
    "CREATE_TOPIC_MESSAGE_IDS",
    "CREATE_TOPIC_MESSAGE_IDS_EXPIRY",
    "INSTALL_CAPACITY",
    "MIGRATIONS",
    "READ_SCHEMA_VERSION",
    "RELEASE_CHECKS",
    "REWRITE_TABLE_SQL",
    "ROLLBACK_CHECKS",
    "SAVEPOINT_CHECKS",
    "SCHEMA_VERSION",
    "SET_SCHEMA_VERSION",
    "SET_WRITABLE_SCHEMA",
    "TABLE_SQL",
]

# "vmqs" in ASCII: marks a file as a sqliteq database (PRAGMA application_id, header offset 68).
APPLICATION_ID = 0x766D7173

# --- schema, version 1 -------------------------------------------------------------------

_CREATE_QUEUES = """
CREATE TABLE queues (
    name     TEXT    PRIMARY KEY,
    kind     TEXT    NOT NULL CHECK (kind IN ('fifo', 'priority')),
    enqueued INTEGER NOT NULL DEFAULT 0,
    done     INTEGER NOT NULL DEFAULT 0
)"""

_CREATE_JOBS = """
CREATE TABLE jobs (
    id           INTEGER PRIMARY KEY,
    queue        TEXT    NOT NULL,
    priority     INTEGER NOT NULL DEFAULT 0,
    data         BLOB    NOT NULL,
    job_id       TEXT,
    state        TEXT    NOT NULL CHECK (state IN ('ready', 'leased', 'done')),
    lease_token  TEXT,
    lease_until  INTEGER,
    attempts     INTEGER NOT NULL DEFAULT 0,
    enqueued_at  INTEGER NOT NULL,
    available_at INTEGER NOT NULL,
    finished_at  INTEGER
)"""

# Versions 1 and 2 (version 3 replaces it with jobs_line). The claim index: every not-done job
# of a queue in take order. It also holds the columns the
# takeable test reads, so a take skips unexpired leases without reading table rows. Done rows
# are left out so that kept completed jobs never slow a take down.
_CREATE_JOBS_CLAIM = """
CREATE INDEX jobs_claim ON jobs (queue, priority, id, state, available_at, lease_until)
WHERE state <> 'done'"""

# Finds the row of an ack id; unique, so two live leases can never share a token.
_CREATE_JOBS_LEASE = """
CREATE UNIQUE INDEX jobs_lease ON jobs (lease_token) WHERE lease_token IS NOT NULL"""

# Dedup: at most one stored (not done) job per (queue, job_id); INSERT OR IGNORE relies on it.
_CREATE_JOBS_DEDUP = """
CREATE UNIQUE INDEX jobs_dedup ON jobs (queue, job_id)
WHERE job_id IS NOT NULL AND state <> 'done'"""

# Retention of completed jobs (remove_on_complete=False), oldest first.
_CREATE_JOBS_DONE = """
CREATE INDEX jobs_done ON jobs (queue, finished_at, id) WHERE state = 'done'"""

# --- schema, version 2: a ready counter per queue, for capacity checks ------------------------

_ADD_QUEUES_READY = "ALTER TABLE queues ADD COLUMN ready INTEGER NOT NULL DEFAULT 0"

# --- schema, version 3: delayed jobs, take order by availability, dead letters ----------------

# The jobs table is rebuilt because its CHECK constraint gains the state 'delayed' (SQLite
# cannot alter a constraint). Dropping the old table drops its indexes and any capacity
# triggers; the opener reinstalls the triggers when the file had them (see _open._migrate).
_CREATE_JOBS_V3 = """
CREATE TABLE jobs_v3 (
    id           INTEGER PRIMARY KEY,
    queue        TEXT    NOT NULL,
    priority     INTEGER NOT NULL DEFAULT 0,
    data         BLOB    NOT NULL,
    job_id       TEXT,
    state        TEXT    NOT NULL CHECK (state IN ('ready', 'delayed', 'leased', 'done')),
    lease_token  TEXT,
    lease_until  INTEGER,
    attempts     INTEGER NOT NULL DEFAULT 0,
    enqueued_at  INTEGER NOT NULL,
    available_at INTEGER NOT NULL,
    finished_at  INTEGER
)"""

# Full scan of the old table, once; ids, and so the order in line, are kept.
_COPY_JOBS_V3 = """
INSERT INTO jobs_v3 (id, queue, priority, data, job_id, state, lease_token, lease_until,
                     attempts, enqueued_at, available_at, finished_at)
SELECT id, queue, priority, data, job_id, state, lease_token, lease_until,
       attempts, enqueued_at, available_at, finished_at
FROM jobs"""

_DROP_JOBS = "DROP TABLE jobs"
_RENAME_JOBS_V3 = "ALTER TABLE jobs_v3 RENAME TO jobs"

# The line: every ready or leased job of a queue in take order (priority, available_at, id),
# with the columns the takeable test reads, so a take skips unexpired leases without reading
# table rows. Delayed and done rows are left out: a take never walks past them.
_CREATE_JOBS_LINE = """
CREATE INDEX jobs_line ON jobs (queue, priority, available_at, id, state, lease_until)
WHERE state IN ('ready', 'leased')"""

# Delayed jobs of a queue by due time: the due ones are a range from the start. ``state`` is
# in the key only so that counts read no table row (the planner wants every column it tests).
_CREATE_JOBS_DELAYED = """
CREATE INDEX jobs_delayed ON jobs (queue, available_at, state) WHERE state = 'delayed'"""

# AUTOINCREMENT: a key (the id) is never reused, so a stale key never names another letter.
_CREATE_DEAD_LETTERS = """
CREATE TABLE dead_letters (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    queue    TEXT    NOT NULL,
    priority INTEGER NOT NULL,
    data     BLOB    NOT NULL,
    job_id   TEXT,
    attempts INTEGER NOT NULL,
    error    TEXT    NOT NULL,
    dead_at  INTEGER NOT NULL
)"""

# A queue's dead letters oldest first: listing, retention by age and by count, purge.
_CREATE_DEAD_LETTERS_AGE = """
CREATE INDEX dead_letters_age ON dead_letters (queue, dead_at, id)"""

_ADD_QUEUES_DEAD = "ALTER TABLE queues ADD COLUMN dead INTEGER NOT NULL DEFAULT 0"

# Version 4: one row about the host's lease clock. ``lease_clock`` names the clock of every
# lease_until in the file ("wall", or "<clock>:<boot id>"); a process whose lease clock is
# another converts or expires the leases when it opens the file (see _open._adopt_lease_clock).
# ``stall_credited_until`` (lease clock, ms): the end of the last write-lock stall whose time
# was given back to the leases (CREDIT_STALLED_LEASES), so no stall is credited twice.
_CREATE_HOST = """
CREATE TABLE host (
    id                   INTEGER PRIMARY KEY CHECK (id = 1),
    lease_clock          TEXT    NOT NULL,
    stall_credited_until INTEGER NOT NULL DEFAULT 0
)"""

# Files before version 4 kept leases on wall time.
_FILL_HOST = "INSERT INTO host (id, lease_clock) VALUES (1, 'wall')"

# Version 5: every (pattern, queue) topic binding of the file, made through any connection. Its
# primary key is the only index; a publish reads the whole table (bindings are few).
_CREATE_TOPIC_BINDINGS = """
CREATE TABLE topic_bindings (
    pattern TEXT NOT NULL,
    queue   TEXT NOT NULL,
    PRIMARY KEY (pattern, queue)
) WITHOUT ROWID"""

# Version 6: job records. One row per ended record; the record of a stored job is the job's own
# row (jobs.keep_ms set), so adds, takes, expiries and promotions write no record.
_CREATE_JOB_RECORDS = """
CREATE TABLE job_records (
    queue            TEXT    NOT NULL,
    job_id           TEXT    NOT NULL,
    state            TEXT    NOT NULL
                     CHECK (state IN ('succeeded', 'failed', 'dead', 'cancelled')),
    keep_ms          INTEGER NOT NULL,
    enqueued_at      INTEGER NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    started_at       INTEGER,
    finished_at      INTEGER NOT NULL,
    expires_at       INTEGER NOT NULL,
    ended_seq        INTEGER NOT NULL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    result           BLOB,
    error            BLOB,
    PRIMARY KEY (queue, job_id)
) WITHOUT ROWID"""

# Ended records of a queue in the order they ended: the limit drops a range from the start,
# retention by age looks at the oldest (expires_at is in the key so it reads no table row), and
# the watcher reads the ends after the last one it told. With the primary key the only index:
# an end writes two b-trees.
_CREATE_JOB_RECORDS_ENDED = """
CREATE INDEX job_records_ended ON job_records (queue, ended_seq, expires_at)"""

_ADD_QUEUES_ENDED = "ALTER TABLE queues ADD COLUMN ended INTEGER NOT NULL DEFAULT 0"
_ADD_JOBS_STARTED_AT = "ALTER TABLE jobs ADD COLUMN started_at INTEGER"
_ADD_JOBS_CANCEL = "ALTER TABLE jobs ADD COLUMN cancel INTEGER NOT NULL DEFAULT 0"
_ADD_JOBS_KEEP_MS = "ALTER TABLE jobs ADD COLUMN keep_ms INTEGER"

# Leased jobs whose cancel was requested, by deadline: the run-out ones are a range from the
# start. Tiny (only flagged jobs), so sweeping it costs nothing when nobody cancels.
_CREATE_JOBS_CANCEL = """
CREATE INDEX jobs_cancel ON jobs (queue, lease_until) WHERE cancel = 1"""

# The line again, with ``cancel`` (version 6): the takeable test reads it for run-out leases, and
# counts (len, stats) stay index-only.
_DROP_JOBS_LINE = "DROP INDEX jobs_line"
_CREATE_JOBS_LINE_V6 = """
CREATE INDEX jobs_line ON jobs (queue, priority, available_at, id, state, lease_until, cancel)
WHERE state IN ('ready', 'leased')"""

# Version 7: the progress of running jobs (IJobProgress), in the job's row while it is stored and
# in its ended record after. NULL in every row a previous version wrote: no progress.
_ADD_JOBS_PROGRESS = "ALTER TABLE jobs ADD COLUMN progress BLOB"
_ADD_JOB_RECORDS_PROGRESS = "ALTER TABLE job_records ADD COLUMN progress BLOB"

# Applied in order; entry i brings a file from user_version i to i + 1, in one transaction.
# Earlier entries stay exactly as that version wrote them: a new file runs them all.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        _CREATE_QUEUES,
        _CREATE_JOBS,
        _CREATE_JOBS_CLAIM,
        _CREATE_JOBS_LEASE,
        _CREATE_JOBS_DEDUP,
        _CREATE_JOBS_DONE,
    ),
    (_ADD_QUEUES_READY,),
    (
        _CREATE_JOBS_V3,
        _COPY_JOBS_V3,
        _DROP_JOBS,
        _RENAME_JOBS_V3,
        _CREATE_JOBS_LINE,
        _CREATE_JOBS_LEASE,
        _CREATE_JOBS_DEDUP,
        _CREATE_JOBS_DONE,
        _CREATE_JOBS_DELAYED,
        _CREATE_DEAD_LETTERS,
        _CREATE_DEAD_LETTERS_AGE,
        _ADD_QUEUES_DEAD,
    ),
    (_CREATE_HOST, _FILL_HOST),
    (_CREATE_TOPIC_BINDINGS,),
    (
        _CREATE_JOB_RECORDS,
        _CREATE_JOB_RECORDS_ENDED,
        _ADD_QUEUES_ENDED,
        _ADD_JOBS_STARTED_AT,
        _ADD_JOBS_CANCEL,
        _ADD_JOBS_KEEP_MS,
        _CREATE_JOBS_CANCEL,
        _DROP_JOBS_LINE,
        _CREATE_JOBS_LINE_V6,
    ),
    (_ADD_JOBS_PROGRESS, _ADD_JOB_RECORDS_PROGRESS),
)
SCHEMA_VERSION = len(MIGRATIONS)

# --- CHECK constraints rewritten in place, on every file, whatever its version ------------------

# SQLite (3.40 measured) tests ``state IN ('a', 'b', 'c', ...)`` in a CHECK constraint by filling
# an ephemeral table for every row it checks: about 32,000 instructions per inserted row or
# changed state, a sixth of a whole job add and of a take-and-acknowledge. An OR chain of
# equalities accepts exactly the same values at a fraction of the cost. MIGRATIONS keep the text
# each version wrote; a write open replaces these constraints by their equivalents with the
# procedure SQLite documents for changing a CHECK constraint (no row is rewritten, and
# user_version stays: sqliteq processes of the same schema version share the file as before).
# (table, constraint as written, its equivalent).
CHECK_REWRITES: tuple[tuple[str, str, str], ...] = (
    (
        "jobs",
        "CHECK (state IN ('ready', 'delayed', 'leased', 'done'))",
        "CHECK (state = 'ready' OR state = 'delayed' OR state = 'leased' OR state = 'done')",
    ),
    (
        "job_records",
        "CHECK (state IN ('succeeded', 'failed', 'dead', 'cancelled'))",
        "CHECK (state = 'succeeded' OR state = 'failed' OR state = 'dead' OR state = 'cancelled')",
    ),
)

# sqlite_master is scanned; it is tiny.
TABLE_SQL = "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = :name"
SAVEPOINT_CHECKS = "SAVEPOINT rewrite_checks"
RELEASE_CHECKS = "RELEASE rewrite_checks"
ROLLBACK_CHECKS = "ROLLBACK TO rewrite_checks"
READ_SCHEMA_VERSION = "PRAGMA schema_version"
# Bumping the schema cookie makes every connection, this one included, read the schema again.
SET_SCHEMA_VERSION = "PRAGMA schema_version = {value:d}"
SET_WRITABLE_SCHEMA = "PRAGMA writable_schema = {value}"
REWRITE_TABLE_SQL = "UPDATE sqlite_master SET sql = :sql WHERE type = 'table' AND name = :name"

# --- queue settings: a table added without a version ------------------------------------------

# Created IF NOT EXISTS by every write open of a queue, not by a migration: the file keeps its
# user_version, so sqliteq processes of schema version 6 that do not know the table go on sharing
# the file (they neither read nor write it). Readers treat a missing table as "nothing stored".
CREATE_QUEUE_SETTINGS = """
CREATE TABLE IF NOT EXISTS queue_settings (
    queue TEXT PRIMARY KEY NOT NULL,
    settings TEXT NOT NULL
) WITHOUT ROWID"""

# Published topic message ids kept for dedup (Topics.publish), each until its expires_at (wall
# ms): made, like queue_settings, by the first publish that keeps one, without a version.
CREATE_TOPIC_MESSAGE_IDS = """
CREATE TABLE IF NOT EXISTS topic_message_ids (
    message_id TEXT PRIMARY KEY NOT NULL,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID"""
CREATE_TOPIC_MESSAGE_IDS_EXPIRY = """
CREATE INDEX IF NOT EXISTS topic_message_ids_expiry ON topic_message_ids (expires_at)"""

# The latest occurrence each schedule added to each queue (IScheduleMarks): made by the first
# occurrence added, without a version, like queue_settings. Never pruned: one row per schedule.
CREATE_SCHEDULE_MARKS = """
CREATE TABLE IF NOT EXISTS schedule_marks (
    queue TEXT NOT NULL,
    schedule TEXT NOT NULL,
    occurrence_ms INTEGER NOT NULL,
    PRIMARY KEY (queue, schedule)
) WITHOUT ROWID"""

# The starts of rate-limited queues' windows (sqliteq._rates): one row per take that leased jobs,
# at its lease-clock time. Made by the first take of a limited queue, without a version, like
# queue_settings; pruned by every take of the queue.
CREATE_RATE_STARTS = """
CREATE TABLE IF NOT EXISTS rate_starts (
    queue TEXT NOT NULL,
    at INTEGER NOT NULL,
    n INTEGER NOT NULL
)"""
CREATE_RATE_STARTS_BY_QUEUE = """
CREATE INDEX IF NOT EXISTS rate_starts_by_queue ON rate_starts (queue, at)"""

# --- capacity bookkeeping: installed by the first set_capacity on a file, kept from then on --

# Files that never use a capacity do not pay for it: until the first set_capacity(n > 0), no
# trigger fires and no jobs_expiry entry is written, and queues.ready is not maintained. The
# installation (these statements, in one write transaction) recounts queues.ready; from then
# on the triggers keep it in the statement that changes a job, for every connection.

# sqlite_master is scanned; it is tiny.
CAPACITY_INSTALLED = """
SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = 'jobs_ready_insert'"""

# Ready rows are only ever inserted (enqueue) and left (take, purge); queues primary key.
_CREATE_READY_ON_INSERT = """
CREATE TRIGGER IF NOT EXISTS jobs_ready_insert AFTER INSERT ON jobs WHEN NEW.state = 'ready'
BEGIN
    UPDATE queues SET ready = ready + 1 WHERE name = NEW.queue;
END"""

# queues primary key.
_CREATE_READY_ON_UPDATE = """
CREATE TRIGGER IF NOT EXISTS jobs_ready_update AFTER UPDATE OF state ON jobs
WHEN (OLD.state = 'ready') <> (NEW.state = 'ready')
BEGIN
    UPDATE queues SET ready = ready + (NEW.state = 'ready') - (OLD.state = 'ready')
    WHERE name = NEW.queue;
END"""

# queues primary key.
_CREATE_READY_ON_DELETE = """
CREATE TRIGGER IF NOT EXISTS jobs_ready_delete AFTER DELETE ON jobs WHEN OLD.state = 'ready'
BEGIN
    UPDATE queues SET ready = ready - 1 WHERE name = OLD.queue;
END"""

# Leased jobs of a queue by deadline: the expired ones are a range from the start, so a
# capacity check counts them without walking the backlog. Leased jobs are few (in flight).
_CREATE_JOBS_EXPIRY = """
CREATE INDEX IF NOT EXISTS jobs_expiry ON jobs (queue, lease_until) WHERE state = 'leased'"""

# jobs_line, once per queue: the counter starts from the jobs stored at installation.
_FILL_QUEUES_READY = """
UPDATE queues SET ready = (
    SELECT count(*) FROM jobs
    WHERE jobs.queue = queues.name AND state IN ('ready', 'leased') AND state = 'ready'
)"""

INSTALL_CAPACITY: tuple[str, ...] = (
    _CREATE_READY_ON_INSERT,
    _CREATE_READY_ON_UPDATE,
    _CREATE_READY_ON_DELETE,
    _CREATE_JOBS_EXPIRY,
    _FILL_QUEUES_READY,
)
