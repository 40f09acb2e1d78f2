--[[
redisq: every Redis operation on one queue, one entry per command (dispatched on ARGV[1]).

Loaded once and run with EVALSHA (redis-py register_script reloads it after NOSCRIPT). Every
call hands over all ten keys of ONE queue; they share the hash tag {<escaped queue name>}, so the
script runs on one Redis Cluster slot and touches no key it was not given. No KEYS, no SCAN.

KEYS (strings, built by redisq/keys.py; <q> stands for "redisq:{<escaped name>}")
  KEYS[1]  <q>:meta        HASH    "kind" -> "fifo" | "priority", set by the first open/enqueue
  KEYS[2]  <q>:ready       ZSET    job id -> priority (FIFO: 0). Waiting jobs, taken lowest first;
                                   equal scores order by member, i.e. by job id = enqueue order
  KEYS[3]  <q>:payloads    HASH    job id -> payload bytes, exactly as enqueued
  KEYS[4]  <q>:priorities  HASH    job id -> priority, so a job whose lease expired keeps it
  KEYS[5]  <q>:attempts    HASH    job id -> deliveries so far (absent: never taken)
  KEYS[6]  <q>:deadlines   ZSET    lease token -> lease deadline (integer ms)
  KEYS[7]  <q>:leased      HASH    lease token -> job id
  KEYS[8]  <q>:dedup       HASH    caller's job id -> job id (enqueue_dedup only)
  KEYS[9]  <q>:job_ids     HASH    job id -> caller's job id (to drop the dedup entry on ack)
  KEYS[10] <q>:seq         STRING  counter; the last job id issued

  job id       the INCR of seq, zero-padded to 16 digits: identical payloads are distinct jobs,
               and members of equal score sort first in, first out.
  lease token  "<random prefix from the client>:<i>": unique per delivery, never reused (the
               prefix is random, so not even a server that lost seq can repeat a token).
  channel      ARGV of enqueue, "<q>:events"; receives "enqueued" (pub/sub, not a key).

Invariant, kept by every command:
  a stored job id is in exactly one of ready (waiting) or the values of leased (in flight);
  payloads and priorities hold an entry for every stored job id and for no other;
  deadlines and leased hold the same tokens; dedup and job_ids are inverses naming stored jobs.
  A lease whose deadline <= now is expired: it can no longer be acked or extended (fencing), it
  counts as waiting, and the next take moves its job back to ready with the same priority and
  job id, hence the same place in line.

ARGV common to every command
  ARGV[1]  string   command name (below)
  ARGV[2]  string   now in integer ms from a test clock; "" = the server's TIME, so hosts with
                    skewed clocks agree (Redis >= 5 replicates script effects, not the script)

Commands, their further ARGV, and replies
  open     ARGV[3] kind ("fifo"|"priority")             -> the stored kind (sets it if unset)
  enqueue  ARGV[3] kind, ARGV[4] priority (integer), ARGV[5] payload (bytes),
           ARGV[6] channel ("" = do not publish), ARGV[7] caller's job id ("" = no dedup),
           ARGV[8] capacity (integer; 0 = unlimited)
                                                        -> 1 stored, 2 already stored (dedup
                                                           hit, nothing published), 0 refused:
                                                           capacity jobs wait, -1 the queue is
                                                           of the other kind
  enqueue_many ARGV[3] kind, ARGV[4] priority (integer), ARGV[5] channel ("" = do not publish),
           ARGV[6] capacity (integer; 0 = unlimited), ARGV[7..] payloads (bytes), in order
                                                        -> how many were stored (the first
                                                           ones, up to capacity); -1 the queue
                                                           is of the other kind. Publishes
                                                           "enqueued" once when any was stored
  take     ARGV[3] n (integer >= 1), ARGV[4] lease length ms (integer), ARGV[5] token prefix,
           ARGV[6] max expired leases to recover first (integer)
                                                        -> flat {payload, token, attempts, ...}
  dequeue  ARGV[3] max expired leases to recover first  -> payload, or nil when empty (no lease)
  ack      ARGV[3..] lease tokens                       -> {1 | 0, ...} one per token
  extend   ARGV[3] lease length ms, ARGV[4] lease token -> 1 renewed, 0 unknown or expired
  len      (none)                                       -> waiting jobs (ready + expired leases)
  values   (none)                                       -> flat {job id, priority, payload, ...}
                                                           of waiting jobs; caller sorts by
                                                           (priority, job id)
  purge    (none)                                       -> number of waiting jobs removed
]]

-- Redis 3.2-4 need this before TIME is followed by writes; later versions always replicate
-- effects and keep the call as a no-op.
if redis.replicate_commands then
  redis.replicate_commands()
end

local K_META, K_READY, K_PAYLOADS, K_PRIORITIES, K_ATTEMPTS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local K_DEADLINES, K_LEASED, K_DEDUP, K_JOB_IDS, K_SEQ = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]

local function now_ms()
  if ARGV[2] ~= '' then
    return tonumber(ARGV[2])
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Drop every trace of a stored job (not its place in ready or leased: the caller did that).
local function forget(id)
  redis.call('HDEL', K_PAYLOADS, id)
  redis.call('HDEL', K_PRIORITIES, id)
  redis.call('HDEL', K_ATTEMPTS, id)
  local job_id = redis.call('HGET', K_JOB_IDS, id)
  if job_id then
    redis.call('HDEL', K_JOB_IDS, id)
    if redis.call('HGET', K_DEDUP, job_id) == id then
      redis.call('HDEL', K_DEDUP, job_id)
    end
  end
end

-- Remove a lease; returns the job id it held, or false.
local function unlease(token)
  local id = redis.call('HGET', K_LEASED, token)
  redis.call('ZREM', K_DEADLINES, token)
  redis.call('HDEL', K_LEASED, token)
  return id
end

-- Move up to `limit` expired leases back to ready, keeping priority and job id.
local function recover(now, limit)
  local expired = redis.call('ZRANGEBYSCORE', K_DEADLINES, '-inf', now, 'LIMIT', 0, limit)
  for _, token in ipairs(expired) do
    local id = unlease(token)
    if id then
      local priority = redis.call('HGET', K_PRIORITIES, id)
      if priority and redis.call('HEXISTS', K_PAYLOADS, id) == 1 then
        redis.call('ZADD', K_READY, priority, id)
      else
        forget(id)
      end
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

local command = ARGV[1]

if command == 'open' then
  return check_kind(ARGV[3])

elseif command == 'enqueue' then
  if check_kind(ARGV[3]) ~= ARGV[3] then
    return -1
  end
  local priority, payload, channel, job_id = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
  if job_id ~= '' then
    local existing = redis.call('HGET', K_DEDUP, job_id)
    if existing and redis.call('HEXISTS', K_PAYLOADS, existing) == 1 then
      return 2
    end
  end
  local capacity = tonumber(ARGV[8])
  if capacity > 0 then
    local waiting = redis.call('ZCARD', K_READY) + redis.call('ZCOUNT', K_DEADLINES, '-inf', now_ms())
    if waiting >= capacity then
      return 0
    end
  end
  local id = string.format('%016d', redis.call('INCR', K_SEQ))
  redis.call('HSET', K_PAYLOADS, id, payload)
  redis.call('HSET', K_PRIORITIES, id, priority)
  redis.call('ZADD', K_READY, priority, id)
  if job_id ~= '' then
    redis.call('HSET', K_DEDUP, job_id, id)
    redis.call('HSET', K_JOB_IDS, id, job_id)
  end
  if channel ~= '' then
    -- Published inside the script: only for a job really stored, and before any taker can
    -- have missed it (subscribers that were listening when the job landed hear about it).
    redis.call('PUBLISH', channel, 'enqueued')
  end
  return 1

elseif command == 'enqueue_many' then
  if check_kind(ARGV[3]) ~= ARGV[3] then
    return -1
  end
  local priority, channel, capacity = ARGV[4], ARGV[5], tonumber(ARGV[6])
  local room = #ARGV - 6
  if capacity > 0 then
    local waiting = redis.call('ZCARD', K_READY) + redis.call('ZCOUNT', K_DEADLINES, '-inf', now_ms())
    room = math.max(0, math.min(room, capacity - waiting))
  end
  for i = 7, 6 + room do
    local id = string.format('%016d', redis.call('INCR', K_SEQ))
    redis.call('HSET', K_PAYLOADS, id, ARGV[i])
    redis.call('HSET', K_PRIORITIES, id, priority)
    redis.call('ZADD', K_READY, priority, id)
  end
  if room > 0 and channel ~= '' then
    redis.call('PUBLISH', channel, 'enqueued')
  end
  return room

elseif command == 'take' then
  local now = now_ms()
  local n, lease_ms, prefix = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
  recover(now, tonumber(ARGV[6]))
  local popped = redis.call('ZPOPMIN', K_READY, n)
  local deadline = now + lease_ms
  local out = {}
  local i = 0
  for j = 1, #popped, 2 do
    local id = popped[j]
    local payload = redis.call('HGET', K_PAYLOADS, id)
    if payload then
      i = i + 1
      local token = prefix .. ':' .. i
      redis.call('ZADD', K_DEADLINES, deadline, token)
      redis.call('HSET', K_LEASED, token, id)
      out[#out + 1] = payload
      out[#out + 1] = token
      out[#out + 1] = redis.call('HINCRBY', K_ATTEMPTS, id, 1)
    else
      forget(id) -- a job without a payload cannot be delivered; keep the invariant
    end
  end
  return out

elseif command == 'dequeue' then
  recover(now_ms(), tonumber(ARGV[3]))
  while true do
    local popped = redis.call('ZPOPMIN', K_READY, 1)
    if #popped == 0 then
      return nil
    end
    local payload = redis.call('HGET', K_PAYLOADS, popped[1])
    forget(popped[1])
    if payload then
      return payload
    end
  end

elseif command == 'ack' then
  local now = now_ms()
  local out = {}
  for i = 3, #ARGV do
    local deadline = redis.call('ZSCORE', K_DEADLINES, ARGV[i])
    if deadline and tonumber(deadline) > now then
      local id = unlease(ARGV[i])
      if id then
        forget(id)
      end
      out[#out + 1] = 1
    else
      out[#out + 1] = 0
    end
  end
  return out

elseif command == 'extend' then
  local now = now_ms()
  local token = ARGV[4]
  local deadline = redis.call('ZSCORE', K_DEADLINES, token)
  if deadline and tonumber(deadline) > now then
    redis.call('ZADD', K_DEADLINES, now + tonumber(ARGV[3]), token)
    return 1
  end
  return 0

elseif command == 'len' then
  return redis.call('ZCARD', K_READY) + redis.call('ZCOUNT', K_DEADLINES, '-inf', now_ms())

elseif command == 'values' then
  local out = {}
  local ready = redis.call('ZRANGE', K_READY, 0, -1, 'WITHSCORES')
  for j = 1, #ready, 2 do
    local payload = redis.call('HGET', K_PAYLOADS, ready[j])
    if payload then
      out[#out + 1] = ready[j]
      out[#out + 1] = ready[j + 1]
      out[#out + 1] = payload
    end
  end
  for _, token in ipairs(redis.call('ZRANGEBYSCORE', K_DEADLINES, '-inf', now_ms())) do
    local id = redis.call('HGET', K_LEASED, token)
    local payload = id and redis.call('HGET', K_PAYLOADS, id)
    local priority = id and redis.call('HGET', K_PRIORITIES, id)
    if payload and priority then
      out[#out + 1] = id
      out[#out + 1] = priority
      out[#out + 1] = payload
    end
  end
  return out

elseif command == 'purge' then
  local removed = 0
  for _, id in ipairs(redis.call('ZRANGE', K_READY, 0, -1)) do
    forget(id)
    removed = removed + 1
  end
  redis.call('DEL', K_READY)
  for _, token in ipairs(redis.call('ZRANGEBYSCORE', K_DEADLINES, '-inf', now_ms())) do
    local id = unlease(token)
    if id then
      forget(id)
      removed = removed + 1
    end
  end
  return removed
end

return redis.error_reply('redisq: unknown command ' .. tostring(command))
