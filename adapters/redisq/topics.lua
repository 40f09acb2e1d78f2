--[[
redisq topics: bindings and publishing (redisq/_topics.py), one entry per command (dispatched on
ARGV[1]).

A script of its own, not a section of queue.lua: a publish runs on every message, and running
queue.lua's whole chunk (its helper closures and its chain of queue commands) cost more than
the copies themselves. What a copy writes is what queue.lua's enqueue writes for a FIFO job
available now with priority 0 (its header has the key layout and the job id format); the few
lines that do it are repeated below, and must follow any change of that layout.

KEYS
  KEYS[1]  redisq:{topics}:bindings   SET     one member per binding: the JSON text
                                              ["<pattern>","<queue>"]
  KEYS[2]  redisq:{topics}:version    STRING  counter, bumped by every bind and unbind that
                                              changed the bindings (absent: 0)
  KEYS[3]  redisq:{topics}:published  STRING  counter, bumped by every publish: the sequence
                                              number live subscribers receive, so that after a
                                              reconnection they know how many publishes they
                                              may have missed
  KEYS[4]  redisq:{topics}:message_ids ZSET   message id -> until when it is kept (ms): a
                                              publish of a kept id stores nothing
  publish only:
  KEYS[5]  redisq:queues              HASH    the registry of queues (list_queues)
  KEYS[6 ..]                          then, per copy, the keys of its queue a copy touches:
                                      with job ids (a publish with a message id) six, its
                                      meta, ready, payloads, dedup, job_ids and seq (KEYS[1, 2,
                                      3, 8, 9, 10] of queue.lua); without, four: meta, ready,
                                      payloads and seq

ARGV[1] command name, ARGV[2] now in integer ms from a test clock ("" = the server's TIME), then

  topic_bind    ARGV[3] member                          -> 1 added, 0 was there
  topic_unbind  ARGV[3] member                          -> 1 removed, 0 was not there
  topic_routes  (none)                                  -> {version, published, member, ...}
  topic_announce ARGV[3] live channel, ARGV[4] message  -> {version, sequence}: bumps
                                                           published and publishes
                                                           "<sequence> <message>" on the live
                                                           channel (Redis Cluster: the copies
                                                           are stored by queue.lua's enqueue,
                                                           one call per queue)
  publish       ARGV[3] the bindings version the caller routed by, ARGV[4] live channel,
                ARGV[5] topic name, ARGV[6] message id ("" = none: no dedup), ARGV[7] data
                (JSON text), ARGV[8] job id prefix for copies without a message id, ARGV[9]
                how long the message id is kept (ms; 0: not kept), ARGV[10] the trace context
                of the publish (JSON text; "": none), then ARGV[11..] the queue names, one per
                copy
                                                        -> {-1, version} when the bindings
                                                           changed since the caller read them
                                                           (nothing stored: route again),
                                                           {0, ""} when the message id is
                                                           kept (nothing stored or announced),
                                                           else {copies stored, sequence}
  topic_seen    ARGV[3] message id                      -> 1 when it is kept, else 0 (drops
                                                           expired ids)
  topic_keep    ARGV[3] message id, ARGV[4] ms to keep it -> 1 (Redis Cluster: after the
                                                           copies of a publish)

publish is the atomic step of "Topics" in varmq.contract.protocols: the caller matched the name against
the bindings of version ARGV[3] and hands over the keys of exactly the queues they route to;
the script stores the copies only if the bindings are still that version, so the copies follow
the bindings as they are when they land, every copy or none. A copy is stored as enqueue
stores a job available now with priority 0 (a queue never opened becomes "fifo": checked when
its first job id is made, see below), skipped as a
dedup hit while a job with its job id is stored, and announced with "enqueued" on its queue's
channel. Whatever was stored, the publish is announced to live subscribers.

A copy's bytes are the job envelope of varmq.contract.envelope, written here because the data
(ARGV[7], JSON text encoded once by envelope.data_json) meets each copy's job id only in Redis:
{"id":<the job id as a JSON string>,"status":"Created","data":<ARGV[7]>} (then
,"trace":<ARGV[10]> when a trace context was given), byte for byte what
envelope.Copies writes in Python. This is the one writer of the envelope outside Python; the
conformance suite decodes what every storage's publish stored.
]]

if redis.replicate_commands then
  redis.replicate_commands()
end

local call = redis.call
local command = ARGV[1]

local function now_ms()
  if ARGV[2] == '' then
    local t = call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return tonumber(ARGV[2])
end

-- Whether message id `id` is kept, after dropping the ids whose time is up.
local function seen(id, now)
  call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  return call('ZSCORE', KEYS[4], id) ~= false
end

if command == 'publish' then
  local version = call('GET', KEYS[2]) or '0'
  if version ~= ARGV[3] then
    return {-1, version}
  end
  local now = now_ms()
  local message_id, data, prefix = ARGV[6], ARGV[7], ARGV[8]
  local keep = tonumber(ARGV[9])
  if message_id ~= '' and keep > 0 then
    if seen(message_id, now) then
      return {0, ''}
    end
    call('ZADD', KEYS[4], now + keep, message_id)
  end
  -- queue.lua's job id: the time it became available (15 digits), then the queue's sequence.
  local id_head = string.format('%015d', now)
  local registry = KEYS[5]
  local sequence = call('INCR', KEYS[3])
  -- ARGV[10]: the publish's trace context as JSON text (envelope.Copies.trace_json), "": none.
  local trace = ARGV[10] ~= '' and (',"trace":' .. ARGV[10]) or ''
  local tail = ',"status":"Created","data":' .. data .. trace .. '}'
  local copies = #ARGV - 10
  local stride = copies > 0 and (#KEYS - 5) / copies or 0
  local dedup = stride == 6
  local stored = 0
  local base = 5
  for i = 1, copies do
    local meta, ready, payloads = KEYS[base + 1], KEYS[base + 2], KEYS[base + 3]
    local queue = ARGV[10 + i]
    local job_id, dedup_key, job_ids, seq
    if dedup then
      dedup_key, job_ids, seq = KEYS[base + 4], KEYS[base + 5], KEYS[base + 6]
      job_id = message_id .. '@' .. queue -- varmq.contract.topic_names.copy_id
    else
      seq = KEYS[base + 4]
    end
    base = base + stride
    -- queue.lua's is_stored: a dedup entry naming a job whose payload is still stored.
    local existing = dedup and call('HGET', dedup_key, job_id)
    if not (existing and call('HEXISTS', payloads, existing) == 1) then
      local n = call('INCR', seq)
      if n == 1 then
        -- No job id was ever made in this queue, so it may have no kind yet: a copy makes it a
        -- FIFO queue (and registers it) unless it was opened. Any later id follows a copy or
        -- an enqueue, which both give the queue its kind first, and nothing deletes a kind.
        if call('HSETNX', meta, 'kind', 'fifo') == 1 then
          call('HSETNX', registry, queue, 'fifo')
        end
      end
      local id = id_head .. string.format('%016d', n)
      local head
      if dedup then
        head = '{"id":' .. cjson.encode(job_id)
        call('HSET', dedup_key, job_id, id)
        call('HSET', job_ids, id, job_id)
      else
        head = '{"id":"' .. prefix .. sequence .. '.' .. i .. '"'
      end
      call('HSET', payloads, id, head .. tail)
      call('ZADD', ready, '0', id)
      -- The queue's channel, "<q>:events", from its meta key "<q>:meta".
      call('PUBLISH', string.sub(meta, 1, -5) .. 'events', 'enqueued')
      stored = stored + 1
    end
  end
  local live_id = message_id ~= '' and cjson.encode(message_id) or 'null'
  call('PUBLISH', ARGV[4],
    sequence .. ' [' .. cjson.encode(ARGV[5]) .. ',' .. live_id .. ',' .. data .. ']')
  return {stored, sequence}

elseif command == 'topic_bind' or command == 'topic_unbind' then
  local changed
  if command == 'topic_bind' then
    changed = call('SADD', KEYS[1], ARGV[3])
  else
    changed = call('SREM', KEYS[1], ARGV[3])
  end
  if changed == 1 then
    call('INCR', KEYS[2])
  end
  return changed

elseif command == 'topic_routes' then
  local reply = {call('GET', KEYS[2]) or '0', call('GET', KEYS[3]) or '0'}
  for _, member in ipairs(call('SMEMBERS', KEYS[1])) do
    reply[#reply + 1] = member
  end
  return reply

elseif command == 'topic_seen' then
  return seen(ARGV[3], now_ms()) and 1 or 0

elseif command == 'topic_keep' then
  call('ZADD', KEYS[4], now_ms() + tonumber(ARGV[4]), ARGV[3])
  return 1

elseif command == 'topic_announce' then
  local sequence = call('INCR', KEYS[3])
  call('PUBLISH', ARGV[3], sequence .. ' ' .. ARGV[4])
  return {call('GET', KEYS[2]) or '0', sequence}
end

return redis.error_reply('redisq topics: unknown command ' .. tostring(command))
