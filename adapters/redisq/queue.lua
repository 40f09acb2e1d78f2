--[[
redisq: every Redis operation on one queue, one entry per command (dispatched on ARGV[1]).

Loaded once and run with EVALSHA (redis-py register_script reloads it after NOSCRIPT). Every
call hands over all seventeen keys of ONE queue; they share the hash tag {<escaped queue name>},
so the script runs on one Redis Cluster slot and touches no key it was not given. No KEYS, no
SCAN. Each command below is atomic.

KEYS (strings, built by redisq/_keys.py; <q> stands for "redisq:{<escaped name>}")
  KEYS[1]  <q>:meta        HASH    "kind" -> "fifo" | "priority", set by the first open/enqueue;
                                   "settings" -> the JSON of the queue's defining settings, set
                                   by the first open that offers them (never changed after);
                                   "mark:<schedule>" -> the latest occurrence (ms) the schedule
                                   added (enqueue with a schedule), only ever moved forward
  KEYS[2]  <q>:ready       ZSET    job id -> priority (FIFO: 0). Waiting jobs, taken lowest first;
                                   equal scores order by member, i.e. by job id = (time the job
                                   became available, enqueue sequence)
  KEYS[3]  <q>:payloads    HASH    job id -> payload bytes, exactly as enqueued
  KEYS[4]  <q>:priorities  HASH    job id -> priority when not 0 (absent: 0), so a job whose lease
                                   expired, or that waits out a delay, keeps it
  KEYS[5]  <q>:attempts    HASH    job id -> deliveries so far (absent: never taken)
  KEYS[6]  <q>:deadlines   ZSET    lease token -> lease deadline (integer ms)
  KEYS[7]  <q>:leased      HASH    lease token -> job id
  KEYS[8]  <q>:dedup       HASH    caller's job id -> job id (enqueue_dedup, enqueue with job id)
  KEYS[9]  <q>:job_ids     HASH    job id -> caller's job id (to drop the dedup entry on ack)
  KEYS[10] <q>:seq         STRING  counter; the last enqueue sequence issued
  KEYS[11] <q>:delayed     ZSET    job id -> due time (integer ms): delayed and nacked jobs
  KEYS[12] <q>:dead        ZSET    dead key -> dead_at (integer ms): the dead-letter shelf, oldest
                                   first
  KEYS[13] <q>:dead_items  HASH    dead key -> payload bytes
  KEYS[14] <q>:dead_info   HASH    dead key -> "<attempts> <priority> <len> <caller's job id><error>"
                                   (len = byte length of the caller's job id, "" when none)
  KEYS[15] <q>:records     HASH    caller's job id -> its job record (keep_results), the text
                                   "<state> <attempts> <enqueued ms> <started ms|-> <finished
                                   ms|-> <cancel requested 0|1> <keep ms> <ref>", ref being the
                                   dead key of a "dead" record ("-" otherwise); and
                                   "\255<caller's job id>" -> the progress bytes of that record
                                   (set_progress; byte 255 never occurs in UTF-8, so no job id
                                   is such a field), absent while none was set
  KEYS[16] <q>:outcomes    HASH    caller's job id -> the result bytes (state succeeded) or the
                                   error bytes (failed, dead, cancelled) of an ended record
  KEYS[17] <q>:record_expiry ZSET  caller's job id -> when its ended record is dropped (ms):
                                   the ended records, soonest dropped first, which is oldest
                                   end first when every object of the queue has the same
                                   keep_results (as varmq.contract.protocols asks); keep_results_limit
                                   drops from its head too
  KEYS[18] <q>:rate        ZSET    lease token -> when it was taken (ms), for a queue opened with
                                   rate_limit: the starts of the current window (a take drops
                                   those older than the window, and those later than now, left
                                   by a server clock that stepped back)

  job id       string.format('%015d%016d', available at (ms), INCR seq): the first 15 digits are
               when the job becomes (or became) available: now for an enqueue, the due time for a
               delayed enqueue or a nack, the requeue time for a dead letter. Ids of equal
               priority therefore sort by availability, then enqueue order; identical payloads
               are distinct jobs. A nack gives the job a new id (new place in line); an expired
               lease does not (same place). Ordering among plain enqueues follows the clock: a
               server clock stepped back by d can reorder jobs enqueued within d of each other.
  dead key     the job id the job had when it was dead-lettered.
  lease token  "<random prefix from the client>:<seq>": unique per delivery, never reused; seq
               (KEYS[10]) differs on every run, so a take that the client retries with the same
               prefix cannot reuse a token, and the random prefix keeps tokens apart even on a
               server that lost seq.
  channel      ARGV of some commands, "<q>:events"; receives "enqueued" (pub/sub, not a key).
  ended        "<q>:ended" (pub/sub, derived from KEYS[1]): receives the caller's job id of
               every record that reached an ended state, from the command that ended it;
               except that an ack ending several records announces them in one message on
  ends         "<q>:ends" (pub/sub): a JSON list of the caller's job ids.

Wake-ups (meta "notified"): add publishes "enqueued" only if it finds the field unset, and
sets it. take and dequeue delete it whenever they find fewer jobs than they asked for (the line
is empty). A consumer goes idle only after such a short take, so every add after a consumer
went idle finds the field unset, or follows an add that did publish after that take, and the
idle consumer hears "enqueued" (pub/sub being lossy, its poll remains the safety net). The other
commands that make jobs available (enqueue, enqueue_many, nack, release, requeue_dead) publish
every time, as before.

Invariant, kept by every command:
  a job id is in exactly one of ready (waiting), delayed (waiting for its due time), the values
  of leased (in flight), or dead (a dead letter, under its dead key);
  payloads holds an entry for every job id in ready, delayed or leased and for no other, and so
  do priorities (non-zero priorities only), attempts (taken ones only) and job_ids (when the
  caller gave an id); deadlines and leased hold the same tokens; dedup and job_ids are inverses
  naming stored jobs; dead, dead_items and dead_info hold the same dead keys.
  Records: a record that is not ended (queued, delayed, running) belongs to the stored job that
  dedup names under its caller's job id, and follows it in the same command as every change of
  that job; record_expiry holds exactly the ended records; outcomes holds
  entries of ended records only. A progress field belongs to a kept record (dropped with it)
  and holds what the consumer of its current take set: every take deletes it. A kept record (ended or not) holds its job id: an enqueue with
  that id stores nothing. An ended record past its expiry counts as gone: every command that
  reads it drops it first, and every take and every end drops up to 100 expired ones, then
  the oldest ends beyond the limit (keep_results_limit) of the object that ended one.
  A lease whose deadline <= now is expired: it can no longer be acked, extended, nacked or
  dead-lettered (fencing), it counts as waiting, and the next take moves its job back to ready
  with the same priority and job id, hence the same place in line. A delayed job whose due
  time <= now counts as waiting; the next take moves it to ready (its id already says its place).

ARGV common to every command
  ARGV[1]  string   command name (below)
  ARGV[2]  string   now in integer ms from a test clock; "" = the server's TIME, so hosts with
                    skewed clocks agree (Redis >= 5 replicates script effects, not the script)

Commands, their further ARGV, and replies ("n" = integer, "bytes" = payload as given)
  open     ARGV[3] kind ("fifo"|"priority"), ARGV[4] settings offered (JSON; "" = none)
                                                        -> {the stored kind (set if unset), the
                                                           stored settings ("" = none)}; the
                                                           offer is stored only if none are and
                                                           the kinds match
  enqueue  ARGV[3] kind, ARGV[4] priority (n), ARGV[5] payload (bytes),
           ARGV[6] channel ("" = do not publish), ARGV[7] caller's job id ("" = no dedup),
           ARGV[8] capacity (n; 0 = unlimited), ARGV[9] delay ms (n; <= 0 = available now),
           ARGV[10] keep ms (n; absent or 0 = no record; a record needs a caller's job id),
           ARGV[11] schedule and ARGV[12] occurrence ms (absent: none): a schedule's
           occurrence, stored only if the schedule's mark is earlier, the mark moved to it
                                                        -> 1 stored, 2 already stored (dedup
                                                           hit, or the mark is at or after the
                                                           occurrence; nothing published), 0
                                                           refused: capacity jobs wait, -1 the
                                                           queue is of the other kind.
                                                           Publishes only for a job available
                                                           now
  add      ARGV[3] kind, ARGV[4] channel ("" = do not publish), ARGV[5] capacity (n; 0 =
           unlimited), ARGV[6] keep ms (n; 0 = no record), ARGV[7..] triples: priority (n),
           caller's job id ("" = no dedup), payload (bytes), each available now
                                                        -> {answer, ...} one per triple, in order,
                                                           answers as enqueue's (1, 2, 0); -1
                                                           (not a list) the queue is of the other
                                                           kind. The producers' group commit:
                                                           many callers' adds in one call.
                                                           Publishes "enqueued" only when it
                                                           stored a job and meta "notified" was
                                                           unset, and sets it (see Wake-ups).
                                                           Plain adds (no job ids, capacity 0)
                                                           may come with KEYS 1, 2, 3, 4, 10
                                                           only, in that order
  enqueue_many ARGV[3] kind, ARGV[4] priority (n), ARGV[5] channel ("" = do not publish),
           ARGV[6] capacity (n; 0 = unlimited), ARGV[7..] payloads (bytes), in order
                                                        -> how many were stored (the first
                                                           ones, up to capacity); -1 the queue
                                                           is of the other kind. Publishes
                                                           "enqueued" once when any was stored
  take     ARGV[3] n (>= 1), ARGV[4] lease length ms (n), ARGV[5] token prefix,
           ARGV[6] max expired leases to recover and max due jobs to promote first (n),
           ARGV[7] records limit (n), ARGV[8] rate_limit count (0: none), ARGV[9] its window
           ms                                           -> flat {payload, token, attempts, ...};
                                                           with a rate limit, headed by the ms
                                                           until the window opens (0: room);
                                                           no more jobs than the window has
                                                           left, each counted a start in KEYS[18]
  dequeue  ARGV[3] max expired leases / due jobs to move first, ARGV[4] records limit (n),
           ARGV[5] rate_limit count (0: none), ARGV[6] its window ms (nil when the window is
           full)
                                                        -> payload, or nil (no lease)
  ack      ARGV[3] records limit (n), ARGV[4] "1" = pairs with results | "0" = tokens only,
           ARGV[5..] lease tokens, or token, result (bytes), token, result, ...
                                                        -> {1 | 0, ...} one per token
  extend   ARGV[3] lease length ms, ARGV[4] lease token -> 1 renewed, 2 renewed and a cancel of
                                                           its job was requested, 0 unknown or
                                                           expired
  nack     ARGV[3] lease token, ARGV[4] delay ms (n; <= 0 = available now),
           ARGV[5] channel ("" = do not publish), ARGV[6] records limit (n)
                                                        -> 1 released (or ended "cancelled"),
                                                           0 unknown or expired
  release  ARGV[3] lease token, ARGV[4] channel ("" = do not publish), ARGV[5] records limit
                                                        -> 1 given back (same job id, so same
                                                           place in line; available now;
                                                           attempts - 1), 0 unknown or expired
  fail     ARGV[3] lease token, ARGV[4] error (bytes), ARGV[5] records limit (n)
                                                        -> 1 the job left the queue for good
                                                           (record "failed", or "cancelled"
                                                           when a cancel was requested), 0
                                                           unknown or expired
  dead_letter ARGV[3] lease token, ARGV[4] error text, ARGV[5] dead-letter limit (n),
           ARGV[6] dead-letter max age ms (n), ARGV[7] "1" = ARGV[8] is the record's error
           (bytes) | "0" = none, ARGV[9] records limit (n)
                                                        -> 1 moved to the shelf (or ended
                                                           "cancelled": not shelved), 0
                                                           unknown or expired. Then drops up to
                                                           100 dead letters older than max age
                                                           and up to 100 of the oldest beyond
                                                           the limit
  job_record ARGV[3] caller's job id, ARGV[4] records limit (n)
                                                        -> {} none, or {record text (KEYS[15]),
                                                           1 | 0 has an outcome, outcome,
                                                           1 | 0 has progress, progress}
  progress ARGV[3] lease token, ARGV[4] progress (bytes)
                                                        -> 1 stored as the progress of the
                                                           record of the job leased under the
                                                           token (nothing else changes), 0
                                                           unknown or expired lease, or the
                                                           job has no record
  cancel   ARGV[3] caller's job id, ARGV[4] records limit (n)
                                                        -> 1 removed (queued, delayed: ended
                                                           "cancelled") or flagged (running),
                                                           0 no record or an ended one
  dead_letters ARGV[3] limit (n >= 1)                   -> flat {dead key, dead_at ms, payload,
                                                           info, ...}, oldest first
  requeue_dead ARGV[3] channel ("" = do not publish), ARGV[4] keep ms (n; 0 = no new record),
           ARGV[5] "all" | "some", ARGV[6..] dead keys (with "some")
                                                        -> how many went back to ready, available
                                                           now, attempts reset (unknown keys
                                                           are ignored)
  purge_dead (none)                                     -> how many dead letters were deleted
  len      (none)                                       -> waiting jobs (ready + expired leases +
                                                           due delayed jobs)
  values   (none)                                       -> flat {job id, priority, payload, ...}
                                                           of waiting jobs; caller sorts by
                                                           (priority, job id)
  purge    ARGV[3] records limit (n)                    -> number of waiting jobs removed
                                                           (delayed jobs not yet due stay);
                                                           their records end "cancelled"
  stats    ARGV[3] rate_limit window ms (0: none)      -> {waiting, in flight, delayed (not yet
                                                           due), dead, oldest availability ms
                                                           among waiting jobs or -1, now ms,
                                                           starts in the rate window (0: none)}
]]

-- Redis 3.2-4 need this before TIME is followed by writes; later versions always replicate
-- effects and keep the call as a no-op.
if redis.replicate_commands then
  redis.replicate_commands()
end

-- Now in integer ms: the test clock's (ARGV[2]), or the server's TIME.
local function now_ms()
  if ARGV[2] ~= '' then
    return tonumber(ARGV[2])
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The plain add, run before the rest of the script defines its functions: the hot path of every
-- producer. The client sends it only five keys (meta, ready, payloads, priorities, seq: the
-- fewer keys, the less Redis parses per call) and only adds without a caller's job id under no
-- capacity (no dedup, no record, no count); any other add comes with all the keys, below.
if ARGV[1] == 'add' and #KEYS == 5 then
  if ARGV[5] ~= '0' then
    return redis.error_reply('redisq: add with five keys takes plain adds only')
  end
  for i = 8, #ARGV, 3 do
    if ARGV[i] ~= '' then
      return redis.error_reply('redisq: add with five keys takes plain adds only')
    end
  end
  -- One read for the kind and the wake-up flag (the flag is set on most adds).
  local meta = redis.call('HMGET', KEYS[1], 'kind', 'notified')
  local kind = meta[1]
  if not kind then
    redis.call('HSET', KEYS[1], 'kind', ARGV[3])
  elseif kind ~= ARGV[3] then
    return -1
  end
  local now = now_ms()
  local count = (#ARGV - 6) / 3
  local seq = redis.call('INCRBY', KEYS[5], count) - count
  local out = {}
  for i = 7, #ARGV, 3 do
    seq = seq + 1
    local id = string.format('%015d%016d', now, seq)
    redis.call('HSET', KEYS[3], id, ARGV[i + 2])
    if ARGV[i] ~= '0' then
      redis.call('HSET', KEYS[4], id, ARGV[i])
    end
    redis.call('ZADD', KEYS[2], ARGV[i], id)
    out[#out + 1] = 1
  end
  if count > 0 and ARGV[4] ~= '' and not meta[2] then
    redis.call('HSET', KEYS[1], 'notified', '1')
    redis.call('PUBLISH', ARGV[4], 'enqueued')
  end
  return out
end

-- The plain take, also before the functions: the hot path of every consumer. It serves a queue
-- that keeps no job records (the records hash does not exist, so neither do ended records to
-- prune) with no lease expired and no delayed job due, i.e. when the take entry below would
-- recover, promote and prune nothing; it then does exactly what that entry does. Any other take
-- falls through to it.
if ARGV[1] == 'take' and #KEYS == 18 and (ARGV[8] or '0') == '0' then
  local now = now_ms()
  if redis.call('EXISTS', KEYS[15]) == 0 and redis.call('ZCOUNT', KEYS[6], '-inf', now) == 0
    and redis.call('ZCOUNT', KEYS[11], '-inf', now) == 0 then
    local n, prefix = tonumber(ARGV[3]), ARGV[5]
    local popped = redis.call('ZPOPMIN', KEYS[2], n)
    if #popped < 2 * n then
      redis.call('HDEL', KEYS[1], 'notified') -- the line is empty: the next add rings again
    end
    local deadline = now + tonumber(ARGV[4])
    local out = {}
    for j = 1, #popped, 2 do
      local id = popped[j]
      local payload = redis.call('HGET', KEYS[3], id)
      if payload then
        local token = prefix .. ':' .. redis.call('INCR', KEYS[10]) -- see the take entry
        redis.call('ZADD', KEYS[6], deadline, token)
        redis.call('HSET', KEYS[7], token, id)
        out[#out + 1] = payload
        out[#out + 1] = token
        out[#out + 1] = redis.call('HINCRBY', KEYS[5], id, 1)
      else
        -- Undeliverable without a payload: forgotten, as forget() does (no records here).
        redis.call('HDEL', KEYS[4], id)
        redis.call('HDEL', KEYS[5], id)
        local job_id = redis.call('HGET', KEYS[9], id)
        if job_id then
          redis.call('HDEL', KEYS[9], id)
          if redis.call('HGET', KEYS[8], job_id) == id then
            redis.call('HDEL', KEYS[8], job_id)
          end
        end
      end
    end
    return out
  end
end

local K_META, K_READY, K_PAYLOADS, K_PRIORITIES, K_ATTEMPTS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local K_DEADLINES, K_LEASED, K_DEDUP, K_JOB_IDS, K_SEQ = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local K_DELAYED, K_DEAD, K_DEAD_ITEMS, K_DEAD_INFO = KEYS[11], KEYS[12], KEYS[13], KEYS[14]
local K_RECORDS, K_OUTCOMES, K_REC_EXPIRY, K_RATE = KEYS[15], KEYS[16], KEYS[17], KEYS[18]

-- Bounds the retention work one dead_letter call does, and the record pruning of one call.
local PRUNE_PER_CALL = 100
-- Ended records kept: set from its ARGV by every command that can end a record.
local records_limit = 10000
-- The field of K_RECORDS that holds the progress of the record of job id j is PROGRESS .. j.
local PROGRESS = '\255'
local ENDED = {succeeded = true, failed = true, dead = true, cancelled = true}

-- A new job id for a job that becomes available at `available` (integer ms).
local function new_id(available)
  return string.format('%015d%016d', available, redis.call('INCR', K_SEQ))
end

-- When the job id became (or becomes) available, in ms.
local function available_at(id)
  return tonumber(string.sub(id, 1, 15))
end

local function priority_of(id)
  return redis.call('HGET', K_PRIORITIES, id) or '0'
end

local function waiting(now)
  return redis.call('ZCARD', K_READY) + redis.call('ZCOUNT', K_DEADLINES, '-inf', now)
    + redis.call('ZCOUNT', K_DELAYED, '-inf', now)
end

-- Drop every trace of a stored job (not its place in ready, delayed or leased: the caller did).
-- `job_id`: its caller's job id when the caller read it already (false: it has none).
local function forget(id, job_id)
  redis.call('HDEL', K_PAYLOADS, id)
  redis.call('HDEL', K_PRIORITIES, id)
  redis.call('HDEL', K_ATTEMPTS, id)
  if job_id == nil then
    job_id = redis.call('HGET', K_JOB_IDS, id)
  end
  if job_id then
    redis.call('HDEL', K_JOB_IDS, id)
    if redis.call('HGET', K_DEDUP, job_id) == id then
      redis.call('HDEL', K_DEDUP, job_id)
    end
  end
end

-- Give a stored job (in no line at the moment) the id `new`, keeping everything else.
local function rename(old, new)
  for _, key in ipairs({K_PAYLOADS, K_PRIORITIES, K_ATTEMPTS}) do
    local value = redis.call('HGET', key, old)
    if value then
      redis.call('HSET', key, new, value)
      redis.call('HDEL', key, old)
    end
  end
  local job_id = redis.call('HGET', K_JOB_IDS, old)
  if job_id then
    redis.call('HDEL', K_JOB_IDS, old)
    redis.call('HSET', K_JOB_IDS, new, job_id)
    if redis.call('HGET', K_DEDUP, job_id) == old then
      redis.call('HSET', K_DEDUP, job_id, new)
    end
  end
end

local function int(n)
  return string.format('%d', n)
end

-- Job records (KEYS[15..18]). A record is a table {state, attempts (n), enq, started,
-- finished (ms as text, "-" for none), cancel ("0" | "1"), keep (ms as text), ref}.
local function record_get(job_id)
  local text = redis.call('HGET', K_RECORDS, job_id)
  if not text then
    return nil
  end
  local state, attempts, enq, started, finished, cancel, keep, ref =
    string.match(text, '^(%S+) (%d+) (%d+) (%S+) (%S+) ([01]) (%d+) (%S+)$')
  return {state = state, attempts = tonumber(attempts), enq = enq, started = started,
    finished = finished, cancel = cancel, keep = keep, ref = ref}
end

local function record_set(job_id, r)
  redis.call('HSET', K_RECORDS, job_id, r.state .. ' ' .. int(r.attempts) .. ' ' .. r.enq .. ' '
    .. r.started .. ' ' .. r.finished .. ' ' .. r.cancel .. ' ' .. r.keep .. ' ' .. r.ref)
end

local function record_drop(job_id)
  redis.call('HDEL', K_RECORDS, job_id, PROGRESS .. job_id)
  redis.call('HDEL', K_OUTCOMES, job_id)
  redis.call('ZREM', K_REC_EXPIRY, job_id)
end

-- The kept record of `job_id`, or nil; an ended record past its expiry is dropped first.
local function record_live(job_id, now)
  local r = record_get(job_id)
  if r and ENDED[r.state] then
    local expiry = redis.call('ZSCORE', K_REC_EXPIRY, job_id)
    if not expiry or tonumber(expiry) <= now then
      record_drop(job_id)
      return nil
    end
  end
  return r
end

-- Drop up to PRUNE_PER_CALL ended records past their expiry; once per call is enough.
local pruned = false
local function records_prune(now)
  if pruned then
    return
  end
  pruned = true
  local old = redis.call('ZRANGEBYSCORE', K_REC_EXPIRY, '-inf', now, 'LIMIT', 0, PRUNE_PER_CALL)
  for _, job_id in ipairs(old) do
    record_drop(job_id)
  end
end

-- Whether the queue holds any record: read once per call, so that a queue that keeps none pays
-- one EXISTS per call for records, not lookups per job.
local any_records = nil

local function has_records()
  if any_records == nil then
    any_records = redis.call('EXISTS', K_RECORDS) == 1
  end
  return any_records
end

-- The caller's job id and the record, not ended, of stored job `id`; nil when it has none.
local function record_of(id)
  if not has_records() then
    return nil
  end
  -- job_ids and dedup are inverses (the invariant): job_id names this very job.
  local job_id = redis.call('HGET', K_JOB_IDS, id)
  if not job_id then
    return nil
  end
  local r = record_get(job_id)
  if not r or ENDED[r.state] then
    return nil
  end
  return job_id, r
end

-- A new record of a job just stored with the caller's job id `job_id`.
local function record_new(job_id, state, now, keep)
  record_set(job_id, {state = state, attempts = 0, enq = int(now), started = '-',
    finished = '-', cancel = '0', keep = keep, ref = '-'})
end

-- End record `r` of `job_id` in `state` with `outcome` (bytes or nil): kept `keep` ms from
-- `now`, announced on the ended channel; then prunes expired records and the oldest beyond
-- records_limit.
local function record_end(job_id, r, state, now, outcome)
  if state == 'failed' and r.cancel == '1' then
    state = 'cancelled'
  end
  r.state = state
  r.finished = int(now)
  record_set(job_id, r)
  if outcome then
    redis.call('HSET', K_OUTCOMES, job_id, outcome)
  else
    redis.call('HDEL', K_OUTCOMES, job_id)
  end
  redis.call('ZADD', K_REC_EXPIRY, now + tonumber(r.keep), job_id)
  redis.call('PUBLISH', string.sub(K_META, 1, -5) .. 'ended', job_id)
  records_prune(now)
  local excess = redis.call('ZCARD', K_REC_EXPIRY) - records_limit
  if excess > 0 then
    local oldest = redis.call('ZRANGE', K_REC_EXPIRY, 0, math.min(excess, PRUNE_PER_CALL) - 1)
    for _, old in ipairs(oldest) do
      record_drop(old)
    end
  end
end

-- Stored job `id` changed: its record (if any) becomes `state`; `attempts` and `started` (ms)
-- when given.
local function record_mark(id, state, attempts, started)
  local job_id, r = record_of(id)
  if not r then
    return
  end
  r.state = state
  if attempts then
    r.attempts = tonumber(attempts)
  end
  if started then
    r.started = int(started)
  end
  record_set(job_id, r)
  if state == 'running' then
    redis.call('HDEL', K_RECORDS, PROGRESS .. job_id) -- a take starts without progress
  end
end

-- Stored job `id` leaves the queue for good in `state` (with `outcome`): its record ends, then
-- the job is forgotten.
local function settle(id, state, now, outcome)
  local job_id, r = record_of(id)
  if r then
    record_end(job_id, r, state, now, outcome)
  end
  forget(id, job_id)
end

-- Batched record writes for the commands that handle many jobs per call (take, ack): a few
-- calls for the whole batch instead of a few per job. Fields go to Redis in chunks, so that no
-- unpack exceeds Lua's stack however large the batch.
local CHUNK = 1000

local function hmget(key, fields)
  local out = {}
  for i = 1, #fields, CHUNK do
    local part = redis.call('HMGET', key, unpack(fields, i, math.min(i + CHUNK - 1, #fields)))
    for j = 1, #part do
      out[#out + 1] = part[j]
    end
  end
  return out
end

-- `cmd key args...` in chunks of whole items of `width` arguments (HSET pairs, ZADD pairs).
local function call_many(cmd, key, args, width)
  local size = CHUNK * width
  for i = 1, #args, size do
    redis.call(cmd, key, unpack(args, i, math.min(i + size - 1, #args)))
  end
end

-- The caller's job ids of stored jobs `ids` (false: none); then those that have one, in order,
-- and `extra[i]` of each of them.
local function named_of(ids, extra)
  local job_ids = hmget(K_JOB_IDS, ids)
  local named, with = {}, {}
  for i = 1, #ids do
    if job_ids[i] then
      named[#named + 1] = job_ids[i]
      with[#with + 1] = extra[i]
    end
  end
  return job_ids, named, with
end

-- The records (not ended) of the stored jobs `ids` become "running", attempt `attempts[i]`
-- started at `now`. Only the leading fields change; the rest of the text is kept as it is.
-- rate_limit: the starts the window (rate_ms long, ending now) has left of rate_count, after
-- dropping the starts that left it and those later than now (a server clock stepped back).
local function rate_left(now, rate_count, rate_ms)
  redis.call('ZREMRANGEBYSCORE', K_RATE, '-inf', now - rate_ms)
  redis.call('ZREMRANGEBYSCORE', K_RATE, '(' .. now, '+inf')
  return rate_count - redis.call('ZCARD', K_RATE)
end

-- rate_limit: ms until the window lets another job start (0: it has room now).
local function rate_wait(now, rate_count, rate_ms)
  if redis.call('ZCARD', K_RATE) < rate_count then
    return 0
  end
  local oldest = redis.call('ZRANGE', K_RATE, 0, 0, 'WITHSCORES')
  return math.max(1, tonumber(oldest[2]) + rate_ms - now)
end

local function records_running(ids, attempts, now)
  if #ids == 0 or not has_records() then
    return
  end
  local _, named, counts = named_of(ids, attempts)
  if #named == 0 then
    return
  end
  local texts = hmget(K_RECORDS, named)
  local started = int(now)
  local fields, progress = {}, {}
  for i = 1, #named do
    local text = texts[i]
    if text then
      local state, enq, rest = string.match(text, '^(%S+) %d+ (%d+) %S+ (.*)$')
      if state and not ENDED[state] then
        fields[#fields + 1] = named[i]
        fields[#fields + 1] = 'running ' .. int(counts[i]) .. ' ' .. enq .. ' ' .. started
          .. ' ' .. rest
        progress[#progress + 1] = PROGRESS .. named[i]
      end
    end
  end
  if #fields > 0 then
    call_many('HSET', K_RECORDS, fields, 2)
    call_many('HDEL', K_RECORDS, progress, 1) -- a take starts without progress
  end
end

-- Stored jobs `ids` leave the queue for good in `state`, job i with `outcomes[i]` (bytes, or
-- false for none): what settle does for each, with the records' writes, the expiry pruning and
-- the limit done once for the batch. The records end exactly as record_end ends each one.
local function settle_many(ids, outcomes, state, now)
  if #ids == 0 then
    return
  end
  if not has_records() then
    for i = 1, #ids do
      forget(ids[i])
    end
    return
  end
  local job_ids, named, named_outcomes = named_of(ids, outcomes)
  local texts = #named > 0 and hmget(K_RECORDS, named) or {}
  local finished = int(now)
  local records, kept, expiry, ended = {}, {}, {}, {}
  for i = 1, #named do
    local text = texts[i]
    local job_id = named[i]
    if text then
      local r_state, head, cancel, keep, ref =
        string.match(text, '^(%S+) (%d+ %d+ %S+) %S+ ([01]) (%d+) (%S+)$')
      if r_state and not ENDED[r_state] then
        local final = state
        if state == 'failed' and cancel == '1' then
          final = 'cancelled'
        end
        records[#records + 1] = job_id
        records[#records + 1] = final .. ' ' .. head .. ' ' .. finished .. ' ' .. cancel .. ' '
          .. keep .. ' ' .. ref
        -- A record that had not ended holds no outcome (the invariant): nothing to delete.
        if named_outcomes[i] then
          kept[#kept + 1] = job_id
          kept[#kept + 1] = named_outcomes[i]
        end
        expiry[#expiry + 1] = now + tonumber(keep)
        expiry[#expiry + 1] = job_id
        ended[#ended + 1] = job_id
      end
    end
  end
  if #ended > 0 then
    call_many('HSET', K_RECORDS, records, 2)
    if #kept > 0 then
      call_many('HSET', K_OUTCOMES, kept, 2)
    end
    call_many('ZADD', K_REC_EXPIRY, expiry, 2)
    -- One message per call: a lone end as record_end tells it, several as one JSON list on
    -- "<q>:ends" (a PUBLISH costs a call like any other).
    local base = string.sub(K_META, 1, -5)
    if #ended == 1 then
      redis.call('PUBLISH', base .. 'ended', ended[1])
    else
      redis.call('PUBLISH', base .. 'ends', cjson.encode(ended))
    end
    records_prune(now)
    -- record_end may drop up to PRUNE_PER_CALL per end; one end adds one record, so this
    -- bound keeps the limit whenever it held before the call.
    local excess = redis.call('ZCARD', K_REC_EXPIRY) - records_limit
    if excess > 0 then
      local oldest = redis.call('ZRANGE', K_REC_EXPIRY, 0,
        math.min(excess, PRUNE_PER_CALL + #ended) - 1)
      for _, old in ipairs(oldest) do
        record_drop(old)
      end
    end
  end
  for i = 1, #ids do
    forget(ids[i], job_ids[i])
  end
end

-- Whether stored job `id` (just given back by its consumer, or whose lease expired) had a
-- cancel requested; if so it ended "cancelled" and is forgotten.
local function cancelled(id, now)
  local job_id, r = record_of(id)
  if r and r.cancel == '1' then
    record_end(job_id, r, 'cancelled', now, nil)
    forget(id, job_id)
    return true
  end
  return false
end

-- Remove a lease; returns the job id it held, or false.
local function unlease(token)
  local id = redis.call('HGET', K_LEASED, token)
  redis.call('ZREM', K_DEADLINES, token)
  redis.call('HDEL', K_LEASED, token)
  return id
end

-- The job id leased under `token` if the lease is still held at `now`, after removing the
-- lease; false (and nothing changed) when the token is unknown or expired.
local function release(token, now)
  local deadline = redis.call('ZSCORE', K_DEADLINES, token)
  if not deadline or tonumber(deadline) <= now then
    return false
  end
  return unlease(token)
end

-- The job leased under `token`, taken back for a nack or a release: its id; 'lost' when the
-- lease is unknown or expired (nothing changed); 'settled' when there is nothing to put back
-- (its payload is gone, or it was cancelled and is now ended as such).
local function take_back(token, now)
  local id = release(token, now)
  if not id then
    return 'lost'
  end
  if redis.call('HEXISTS', K_PAYLOADS, id) == 0 then
    forget(id)
    return 'settled'
  end
  if cancelled(id, now) then
    return 'settled'
  end
  return id
end

-- Move up to `limit` expired leases back to ready, keeping priority and job id.
local function recover(now, limit)
  local expired = redis.call('ZRANGEBYSCORE', K_DEADLINES, '-inf', now, 'LIMIT', 0, limit)
  for _, token in ipairs(expired) do
    local id = unlease(token)
    if id then
      if redis.call('HEXISTS', K_PAYLOADS, id) == 0 then
        forget(id)
      elseif not cancelled(id, now) then
        redis.call('ZADD', K_READY, priority_of(id), id)
        record_mark(id, 'queued')
      end
    end
  end
end

-- Move up to `limit` due delayed jobs to ready; their ids already carry their due time.
local function promote(now, limit)
  local due = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', now, 'LIMIT', 0, limit)
  for _, id in ipairs(due) do
    redis.call('ZREM', K_DELAYED, id)
    if redis.call('HEXISTS', K_PAYLOADS, id) == 1 then
      redis.call('ZADD', K_READY, priority_of(id), id)
      record_mark(id, 'queued')
    else
      forget(id)
    end
  end
end

local function check_kind(kind)
  local stored = redis.call('HGET', K_META, 'kind')
  if not stored then
    redis.call('HSET', K_META, 'kind', kind)
    return kind
  end
  return stored
end

-- Remember the caller's job id of stored job `id` for dedup.
local function link(job_id, id)
  redis.call('HSET', K_DEDUP, job_id, id)
  redis.call('HSET', K_JOB_IDS, id, job_id)
end

-- Whether the caller's job id names a job still stored (waiting, delayed or in flight).
local function is_stored(job_id)
  local existing = redis.call('HGET', K_DEDUP, job_id)
  return existing and redis.call('HEXISTS', K_PAYLOADS, existing) == 1
end

-- Store a new job `id` (not yet in any line: the caller puts it in one) with its priority, and
-- the caller's job id ("" for none) with a record in `state` when `keep` ms > 0.
local function store(id, payload, priority, job_id, keep, state, now)
  redis.call('HSET', K_PAYLOADS, id, payload)
  if priority ~= '0' then
    redis.call('HSET', K_PRIORITIES, id, priority)
  end
  if job_id ~= '' then
    link(job_id, id)
    if keep > 0 then
      record_new(job_id, state, now, int(keep))
    end
  end
end

local function drop_dead(key)
  redis.call('ZREM', K_DEAD, key)
  redis.call('HDEL', K_DEAD_ITEMS, key)
  redis.call('HDEL', K_DEAD_INFO, key)
end

-- attempts, priority, caller's job id ("" when none), error text of a dead_info value.
local function parse_info(info)
  local attempts, priority, length, rest = string.match(info, '^(%d+) (%-?%d+) (%d+) (.*)$')
  length = tonumber(length)
  return tonumber(attempts), priority, string.sub(rest, 1, length), string.sub(rest, length + 1)
end

local command = ARGV[1]

if command == 'open' then
  local kind = check_kind(ARGV[3])
  local offer = ARGV[4] or ''
  if offer ~= '' and kind == ARGV[3] then
    redis.call('HSETNX', K_META, 'settings', offer)
  end
  return {kind, redis.call('HGET', K_META, 'settings') or ''}

elseif command == 'enqueue' then
  if check_kind(ARGV[3]) ~= ARGV[3] then
    return -1
  end
  local priority, payload, channel, job_id = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
  local keep = tonumber(ARGV[10] or '0')
  local now = now_ms()
  local mark, occurrence = nil, nil
  if ARGV[11] then
    mark, occurrence = 'mark:' .. ARGV[11], tonumber(ARGV[12])
    local marked = redis.call('HGET', K_META, mark)
    if marked and tonumber(marked) >= occurrence then
      return 2 -- that occurrence, or a later one, was added already
    end
  end
  if job_id ~= '' and (is_stored(job_id) or record_live(job_id, now)) then
    if mark then
      redis.call('HSET', K_META, mark, occurrence)
    end
    return 2
  end
  local capacity = tonumber(ARGV[8])
  if capacity > 0 and waiting(now) >= capacity then
    return 0
  end
  local delay = tonumber(ARGV[9])
  local id = new_id(delay > 0 and now + delay or now)
  store(id, payload, priority, job_id, keep, delay > 0 and 'delayed' or 'queued', now)
  if mark then
    redis.call('HSET', K_META, mark, occurrence)
  end
  if delay > 0 then
    redis.call('ZADD', K_DELAYED, now + delay, id)
    return 1
  end
  redis.call('ZADD', K_READY, priority, id)
  if channel ~= '' then
    -- Published inside the script: only for a job really stored, and before any taker can
    -- have missed it (subscribers that were listening when the job landed hear about it).
    redis.call('PUBLISH', channel, 'enqueued')
  end
  return 1

elseif command == 'add' then
  if check_kind(ARGV[3]) ~= ARGV[3] then
    return -1
  end
  local channel, capacity, keep = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
  local now = now_ms()
  local room = -1 -- unlimited
  if capacity > 0 then
    room = math.max(0, capacity - waiting(now))
  end
  local out, stored = {}, 0
  for i = 7, #ARGV, 3 do
    local priority, job_id = ARGV[i], ARGV[i + 1]
    if job_id ~= '' and (is_stored(job_id) or record_live(job_id, now)) then
      out[#out + 1] = 2 -- also a job id stored earlier in this very call
    elseif room == 0 then
      out[#out + 1] = 0
    else
      local id = new_id(now)
      store(id, ARGV[i + 2], priority, job_id, keep, 'queued', now)
      redis.call('ZADD', K_READY, priority, id)
      room = room - 1
      stored = stored + 1
      out[#out + 1] = 1
    end
  end
  if stored > 0 and channel ~= '' and redis.call('HSETNX', K_META, 'notified', '1') == 1 then
    redis.call('PUBLISH', channel, 'enqueued')
  end
  return out

elseif command == 'enqueue_many' then
  if check_kind(ARGV[3]) ~= ARGV[3] then
    return -1
  end
  local priority, channel, capacity = ARGV[4], ARGV[5], tonumber(ARGV[6])
  local now = now_ms()
  local room = #ARGV - 6
  if capacity > 0 then
    room = math.max(0, math.min(room, capacity - waiting(now)))
  end
  for i = 7, 6 + room do
    local id = new_id(now)
    redis.call('HSET', K_PAYLOADS, id, ARGV[i])
    if priority ~= '0' then
      redis.call('HSET', K_PRIORITIES, id, priority)
    end
    redis.call('ZADD', K_READY, priority, id)
  end
  if room > 0 and channel ~= '' then
    redis.call('PUBLISH', channel, 'enqueued')
  end
  return room

elseif command == 'take' then
  local now = now_ms()
  local n, lease_ms, prefix = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
  records_limit = tonumber(ARGV[7] or records_limit)
  recover(now, tonumber(ARGV[6]))
  promote(now, tonumber(ARGV[6]))
  records_prune(now)
  local rate_count, rate_ms = tonumber(ARGV[8] or '0'), tonumber(ARGV[9] or '0')
  if rate_count > 0 then
    n = math.min(n, rate_left(now, rate_count, rate_ms))
  end
  local popped = n > 0 and redis.call('ZPOPMIN', K_READY, n) or {}
  if n > 0 and #popped < 2 * n then
    redis.call('HDEL', K_META, 'notified') -- the line is empty: the next add rings again
  end
  local deadline = now + lease_ms
  local out = {}
  if rate_count > 0 then
    out[1] = 0 -- the ms until the window opens, set below once the starts are counted
  end
  local leased, counts = {}, {}
  for j = 1, #popped, 2 do
    local id = popped[j]
    local payload = redis.call('HGET', K_PAYLOADS, id)
    if payload then
      -- The sequence makes the token unique per run of this script, not per client call:
      -- a take the client retries after a lost reply runs again with the same prefix, and
      -- reusing a token would overwrite the first run's lease and strand its job.
      local token = prefix .. ':' .. redis.call('INCR', K_SEQ)
      redis.call('ZADD', K_DEADLINES, deadline, token)
      redis.call('HSET', K_LEASED, token, id)
      local attempts = redis.call('HINCRBY', K_ATTEMPTS, id, 1)
      out[#out + 1] = payload
      out[#out + 1] = token
      out[#out + 1] = attempts
      leased[#leased + 1] = id
      counts[#counts + 1] = attempts
      if rate_count > 0 then
        redis.call('ZADD', K_RATE, now, token)
      end
    else
      forget(id) -- a job without a payload cannot be delivered; keep the invariant
    end
  end
  records_running(leased, counts, now)
  if rate_count > 0 then
    out[1] = rate_wait(now, rate_count, rate_ms)
  end
  return out

elseif command == 'dequeue' then
  local now = now_ms()
  records_limit = tonumber(ARGV[4] or records_limit)
  recover(now, tonumber(ARGV[3]))
  promote(now, tonumber(ARGV[3]))
  local rate_count, rate_ms = tonumber(ARGV[5] or '0'), tonumber(ARGV[6] or '0')
  if rate_count > 0 then
    if rate_left(now, rate_count, rate_ms) <= 0 then
      return nil
    end
    -- Counted before the pop: an empty line leaves a start that never ran (at most one).
    redis.call('ZADD', K_RATE, now, 'dequeue:' .. redis.call('INCR', K_SEQ))
  end
  while true do
    local popped = redis.call('ZPOPMIN', K_READY, 1)
    if #popped == 0 then
      redis.call('HDEL', K_META, 'notified') -- the line is empty: the next add rings again
      return nil
    end
    local payload = redis.call('HGET', K_PAYLOADS, popped[1])
    if payload then
      -- Taken for good: nobody will report an outcome.
      local attempts = (tonumber(redis.call('HGET', K_ATTEMPTS, popped[1])) or 0) + 1
      record_mark(popped[1], 'running', attempts, now)
    end
    settle(popped[1], 'succeeded', now, nil)
    if payload then
      return payload
    end
  end

elseif command == 'ack' then
  local now = now_ms()
  records_limit = tonumber(ARGV[3])
  local step = ARGV[4] == '1' and 2 or 1
  local out = {}
  local ids, outcomes = {}, {}
  for i = 5, #ARGV, step do
    local deadline = redis.call('ZSCORE', K_DEADLINES, ARGV[i])
    if deadline and tonumber(deadline) > now then
      local id = unlease(ARGV[i])
      if id then
        ids[#ids + 1] = id
        outcomes[#outcomes + 1] = step == 2 and ARGV[i + 1] or false
      end
      out[#out + 1] = 1
    else
      out[#out + 1] = 0
    end
  end
  -- Every lease is checked and removed first; the jobs then leave together. A token names one
  -- delivery of one job, so no job of the batch is seen twice.
  settle_many(ids, outcomes, 'succeeded', now)
  return out

elseif command == 'extend' then
  local now = now_ms()
  local token = ARGV[4]
  local deadline = redis.call('ZSCORE', K_DEADLINES, token)
  if deadline and tonumber(deadline) > now then
    redis.call('ZADD', K_DEADLINES, now + tonumber(ARGV[3]), token)
    local _, r = record_of(redis.call('HGET', K_LEASED, token))
    if r and r.cancel == '1' then
      return 2
    end
    return 1
  end
  return 0

elseif command == 'nack' then
  local now = now_ms()
  records_limit = tonumber(ARGV[6] or records_limit)
  local id = take_back(ARGV[3], now)
  if id == 'lost' then
    return 0
  elseif id == 'settled' then
    return 1
  end
  local delay, channel = tonumber(ARGV[4]), ARGV[5]
  local due = delay > 0 and now + delay or now
  local new = new_id(due)
  rename(id, new)
  if delay > 0 then
    redis.call('ZADD', K_DELAYED, due, new)
    record_mark(new, 'delayed')
  else
    redis.call('ZADD', K_READY, priority_of(new), new)
    record_mark(new, 'queued')
    if channel ~= '' then
      redis.call('PUBLISH', channel, 'enqueued')
    end
  end
  return 1

elseif command == 'release' then
  local now = now_ms()
  records_limit = tonumber(ARGV[5] or records_limit)
  local id = take_back(ARGV[3], now)
  if id == 'lost' then
    return 0
  elseif id == 'settled' then
    return 1
  end
  -- This delivery does not count: the next take reports the same attempt again.
  local attempts = redis.call('HINCRBY', K_ATTEMPTS, id, -1)
  if attempts <= 0 then
    redis.call('HDEL', K_ATTEMPTS, id)
  end
  redis.call('ZADD', K_READY, priority_of(id), id)
  record_mark(id, 'queued', math.max(attempts, 0))
  if ARGV[4] ~= '' then
    redis.call('PUBLISH', ARGV[4], 'enqueued')
  end
  return 1

elseif command == 'fail' then
  local now = now_ms()
  records_limit = tonumber(ARGV[5])
  local id = release(ARGV[3], now)
  if not id then
    return 0
  end
  settle(id, 'failed', now, ARGV[4])
  return 1

elseif command == 'dead_letter' then
  local now = now_ms()
  records_limit = tonumber(ARGV[9] or records_limit)
  local id = release(ARGV[3], now)
  if not id then
    return 0
  end
  if cancelled(id, now) then
    return 1
  end
  local payload = redis.call('HGET', K_PAYLOADS, id)
  local attempts = redis.call('HGET', K_ATTEMPTS, id) or '0'
  local job_id = redis.call('HGET', K_JOB_IDS, id) or ''
  local priority = priority_of(id)
  local record_id, r = record_of(id)
  if r then
    r.ref = id -- the dead key, so that requeue_dead knows the record is this letter's
    record_end(record_id, r, 'dead', now, ARGV[7] == '1' and ARGV[8] or nil)
  end
  forget(id)
  if payload then
    redis.call('ZADD', K_DEAD, now, id)
    redis.call('HSET', K_DEAD_ITEMS, id, payload)
    redis.call('HSET', K_DEAD_INFO, id,
      attempts .. ' ' .. priority .. ' ' .. #job_id .. ' ' .. job_id .. ARGV[4])
  end
  local limit, max_age = tonumber(ARGV[5]), tonumber(ARGV[6])
  local old = redis.call('ZRANGEBYSCORE', K_DEAD, '-inf', '(' .. (now - max_age),
    'LIMIT', 0, PRUNE_PER_CALL)
  for _, key in ipairs(old) do
    drop_dead(key)
  end
  local excess = redis.call('ZCARD', K_DEAD) - limit
  if excess > 0 then
    for _, key in ipairs(redis.call('ZRANGE', K_DEAD, 0, math.min(excess, PRUNE_PER_CALL) - 1)) do
      drop_dead(key)
    end
  end
  return 1

elseif command == 'dead_letters' then
  local out = {}
  local dead = redis.call('ZRANGE', K_DEAD, 0, tonumber(ARGV[3]) - 1, 'WITHSCORES')
  for j = 1, #dead, 2 do
    local key = dead[j]
    local payload = redis.call('HGET', K_DEAD_ITEMS, key)
    local info = redis.call('HGET', K_DEAD_INFO, key)
    if payload and info then
      out[#out + 1] = key
      out[#out + 1] = dead[j + 1]
      out[#out + 1] = payload
      out[#out + 1] = info
    end
  end
  return out

elseif command == 'requeue_dead' then
  local now = now_ms()
  local channel, keep = ARGV[3], tonumber(ARGV[4])
  local keys = {}
  if ARGV[5] == 'all' then
    keys = redis.call('ZRANGE', K_DEAD, 0, -1)
  else
    for i = 6, #ARGV do
      keys[#keys + 1] = ARGV[i]
    end
  end
  local count = 0
  for _, key in ipairs(keys) do
    local payload = redis.call('HGET', K_DEAD_ITEMS, key)
    local info = redis.call('HGET', K_DEAD_INFO, key)
    if redis.call('ZSCORE', K_DEAD, key) and payload and info then
      local _, priority, job_id = parse_info(info)
      drop_dead(key)
      local id = new_id(now)
      redis.call('HSET', K_PAYLOADS, id, payload)
      if priority ~= '0' then
        redis.call('HSET', K_PRIORITIES, id, priority)
      end
      if job_id ~= '' then
        local r = record_live(job_id, now)
        if r and r.state == 'dead' and r.ref == key then
          -- Its own record: queued again, with no attempt and no outcome.
          link(job_id, id)
          redis.call('HDEL', K_OUTCOMES, job_id)
          redis.call('HDEL', K_RECORDS, PROGRESS .. job_id)
          redis.call('ZREM', K_REC_EXPIRY, job_id)
          record_new(job_id, 'queued', now, r.keep)
        elseif not r and not is_stored(job_id) then
          link(job_id, id)
          if keep > 0 then
            record_new(job_id, 'queued', now, int(keep))
          end
        end
      end
      redis.call('ZADD', K_READY, priority, id)
      count = count + 1
    end
  end
  if count > 0 and channel ~= '' then
    redis.call('PUBLISH', channel, 'enqueued')
  end
  return count

elseif command == 'purge_dead' then
  local count = redis.call('ZCARD', K_DEAD)
  redis.call('DEL', K_DEAD, K_DEAD_ITEMS, K_DEAD_INFO)
  return count

elseif command == 'len' then
  return waiting(now_ms())

elseif command == 'values' then
  local now = now_ms()
  local out = {}
  local function add(id, priority)
    local payload = redis.call('HGET', K_PAYLOADS, id)
    if payload then
      out[#out + 1] = id
      out[#out + 1] = priority
      out[#out + 1] = payload
    end
  end
  local ready = redis.call('ZRANGE', K_READY, 0, -1, 'WITHSCORES')
  for j = 1, #ready, 2 do
    add(ready[j], ready[j + 1])
  end
  for _, token in ipairs(redis.call('ZRANGEBYSCORE', K_DEADLINES, '-inf', now)) do
    local id = redis.call('HGET', K_LEASED, token)
    if id then
      add(id, priority_of(id))
    end
  end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', now)) do
    add(id, priority_of(id))
  end
  return out

elseif command == 'purge' then
  local now = now_ms()
  records_limit = tonumber(ARGV[3] or records_limit)
  local removed = 0
  for _, id in ipairs(redis.call('ZRANGE', K_READY, 0, -1)) do
    settle(id, 'cancelled', now, nil)
    removed = removed + 1
  end
  redis.call('DEL', K_READY)
  for _, token in ipairs(redis.call('ZRANGEBYSCORE', K_DEADLINES, '-inf', now)) do
    local id = unlease(token)
    if id then
      settle(id, 'cancelled', now, nil)
      removed = removed + 1
    end
  end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', now)) do
    redis.call('ZREM', K_DELAYED, id)
    settle(id, 'cancelled', now, nil)
    removed = removed + 1
  end
  return removed

elseif command == 'job_record' then
  local now = now_ms()
  records_limit = tonumber(ARGV[4])
  -- Bring the queue up to the clock first, so an expired lease or a due job reads right.
  recover(now, PRUNE_PER_CALL)
  promote(now, PRUNE_PER_CALL)
  local job_id = ARGV[3]
  local r = record_live(job_id, now)
  if not r then
    return {}
  end
  local outcome = redis.call('HGET', K_OUTCOMES, job_id)
  local progress = redis.call('HGET', K_RECORDS, PROGRESS .. job_id)
  return {redis.call('HGET', K_RECORDS, job_id), outcome and 1 or 0, outcome or '',
    progress and 1 or 0, progress or ''}

elseif command == 'progress' then
  local now = now_ms()
  local token = ARGV[3]
  local deadline = redis.call('ZSCORE', K_DEADLINES, token)
  if not deadline or tonumber(deadline) <= now then
    return 0 -- fenced, like ack: the lease is unknown or ran out
  end
  local job_id, r = record_of(redis.call('HGET', K_LEASED, token))
  if not r then
    return 0 -- no record to keep it in
  end
  redis.call('HSET', K_RECORDS, PROGRESS .. job_id, ARGV[4])
  return 1

elseif command == 'cancel' then
  local now = now_ms()
  records_limit = tonumber(ARGV[4])
  recover(now, PRUNE_PER_CALL)
  promote(now, PRUNE_PER_CALL)
  local job_id = ARGV[3]
  local r = record_live(job_id, now)
  if not r or ENDED[r.state] then
    return 0
  end
  if r.state == 'running' then
    r.cancel = '1'
    record_set(job_id, r)
    return 1
  end
  local id = redis.call('HGET', K_DEDUP, job_id)
  if id then
    redis.call('ZREM', K_READY, id)
    redis.call('ZREM', K_DELAYED, id)
    forget(id)
  end
  record_end(job_id, r, 'cancelled', now, nil)
  return 1

elseif command == 'stats' then
  local now = now_ms()
  local oldest = -1
  local function seen(id)
    local at = available_at(id)
    if at and (oldest < 0 or at < oldest) then
      oldest = at
    end
  end
  -- The oldest waiting job heads the line of some priority: visit the head of each priority
  -- (bounded), then expired leases (bounded; a take recovers them soon) and due delayed jobs.
  local head = redis.call('ZRANGE', K_READY, 0, 0, 'WITHSCORES')
  local hops = 0
  while #head > 0 and hops < 1000 do
    seen(head[1])
    hops = hops + 1
    head = redis.call('ZRANGEBYSCORE', K_READY, '(' .. head[2], '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  end
  for _, token in ipairs(redis.call('ZRANGEBYSCORE', K_DEADLINES, '-inf', now, 'LIMIT', 0, 100)) do
    local id = redis.call('HGET', K_LEASED, token)
    if id then
      seen(id)
    end
  end
  local first_due = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', now, 'LIMIT', 0, 1)
  if #first_due > 0 then
    seen(first_due[1])
  end
  local expired = redis.call('ZCOUNT', K_DEADLINES, '-inf', now)
  local due = redis.call('ZCOUNT', K_DELAYED, '-inf', now)
  local rate_ms = tonumber(ARGV[3] or '0')
  return {
    redis.call('ZCARD', K_READY) + expired + due,
    redis.call('ZCARD', K_DEADLINES) - expired,
    redis.call('ZCARD', K_DELAYED) - due,
    redis.call('ZCARD', K_DEAD),
    oldest,
    now,
    rate_ms > 0 and redis.call('ZCOUNT', K_RATE, '(' .. (now - rate_ms), now) or 0,
  }
end

return redis.error_reply('redisq: unknown command ' .. tostring(command))
