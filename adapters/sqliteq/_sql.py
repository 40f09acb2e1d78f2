"""Every SQL statement sqliteq runs, the schema, and its migrations: the one place SQL lives.

No I/O here. Each statement is a named constant, or, where a batch is settled in one
statement, made from a constant template for a few batch sizes (:func:`acknowledge_leases`);
the comment above it names the index it relies on. Parameters are always bound, by name
(``:queue``, ``:now``) or by number (``?1``), never interpolated, so a queue name may be any
text.

Layout (schema version 6)
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

Take order
    ``(priority, available_at, id)``. A plain enqueue's ``available_at`` is its enqueue time; a
    delayed or nacked job's is its due time, so once due it joins the end of its priority's
    line. A nack gives the row a new id (``max(id) + 1``), and a requeued dead letter is a new
    row: either goes behind every job already waiting at the same millisecond. Promotion keeps
    the id given when the job was delayed. An expired lease changes neither ``available_at``
    nor ``id``: the job keeps its place.

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

import functools

__all__ = [
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
    "APPLICATION_ID",
    "BEGIN_IMMEDIATE",
    "BIND_TOPIC",
    "BUMP_ENQUEUED",
    "BUMP_ENQUEUED_BY",
    "CAPACITY_INSTALLED",
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
    "INSTALL_CAPACITY",
    "INTEGRITY_CHECK",
    "JOB_ID_STORED",
    "LIST_DEAD",
    "LIST_QUEUES",
    "MIGRATIONS",
    "NACK",
    "PROMOTE_DUE",
    "PRUNE_DEAD_BY_AGE",
    "PRUNE_DEAD_OLDEST",
    "PRUNE_DONE_BY_AGE",
    "PRUNE_DONE_OLDEST",
    "PURGE_TAKEABLE",
    "QUEUE_COUNTER",
    "QUEUE_COUNTERS",
    "QUEUE_KIND",
    "QUICK_CHECK",
    "READ_APPLICATION_ID",
    "READ_USER_VERSION",
    "READ_LEASE_CLOCK",
    "READ_SYNCHRONOUS",
    "REGISTER_QUEUE",
    "RELEASE",
    "REQUEUE_DEAD",
    "ROLLBACK",
    "SCHEMA_VERSION",
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
    "SWEEP_CANCELLED",
    "TAKE_DEAD_RECORD",
    "CHECK_REWRITES",
    "READ_SCHEMA_VERSION",
    "RELEASE_CHECKS",
    "REWRITE_TABLE_SQL",
    "ROLLBACK_CHECKS",
    "SAVEPOINT_CHECKS",
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

# jobs_line, walked in take order: up to :n takeable jobs get a fresh lease token.
# RETURNING order is unspecified; the caller sorts by (priority, available_at, id).
CLAIM = f"""
UPDATE jobs
SET state = 'leased',
    lease_token = lower(hex(randomblob(16))),
    lease_until = :lease_now + :lease_ms,
    attempts = attempts + 1,
    started_at = :now
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

# What a settle that ends a job returns, for its record (version 6).
_SETTLED = "RETURNING job_id, attempts, started_at, cancel, keep_ms, enqueued_at"

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
RETURNING lease_token, job_id, attempts, started_at, cancel, keep_ms, enqueued_at"""


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

# jobs_lease: a lease given back (nack, release, dead letter) whose cancel was requested ends
# the job instead (version 6); RELEASE, NACK and DEAD_LETTER leave such a row alone.
SETTLE_CANCELLED = f"DELETE FROM jobs WHERE {_LIVE_LEASE} AND cancel = 1 {_SETTLED}"

# jobs_cancel, a range from the start: flagged jobs whose consumer let the lease run out end
# cancelled. Run first in every take, cancel and job_record that finds one.
SWEEP_CANCELLED = """
DELETE FROM jobs WHERE queue = :queue AND cancel = 1 AND lease_until <= :lease_now
AND state = 'leased'
RETURNING job_id, attempts, started_at, cancel, keep_ms, enqueued_at"""

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
RETURNING priority, data, job_id, attempts, started_at, keep_ms, enqueued_at"""

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

# --- job records (schema version 6) -------------------------------------------------------------

# jobs_dedup for a stored job with a record (keep_ms set), the job_records primary key for an
# ended record: one statement, so one snapshot of both; the stored job first. Columns: rank, state,
# enqueued_at, attempts, started_at, finished_at, expires_at, cancel, result, error, then the
# job's row id, state, available_at and lease_until (NULL for an ended record).
READ_RECORD = """
SELECT 0, 'live', enqueued_at, attempts, started_at, NULL, NULL, cancel, NULL, NULL,
       id, state, available_at, lease_until
FROM jobs
WHERE queue = :queue AND job_id = :job_id AND state <> 'done' AND keep_ms IS NOT NULL
UNION ALL
SELECT 1, state, enqueued_at, attempts, started_at, finished_at, expires_at, cancel_requested,
       result, error, NULL, NULL, NULL, NULL
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
