--[[
redisq worker records (redisq/_workers.py): "Workers seen from anywhere" of
varmq.contract.protocols, one entry per command (dispatched on ARGV[1]).

KEYS (both share the hash tag {workers}: one Redis Cluster slot)
  KEYS[1]  redisq:{workers}:records  HASH  worker id -> "<started_ms> <seen_ms> <expires_ms> "
                                           followed by the record bytes the worker registered
                                           (its JSON object, kept as given)
  KEYS[2]  redisq:{workers}:expiry   ZSET  worker id -> expires_ms: when it is shown as gone

ARGV[1] command name, ARGV[2] now in integer ms from a test clock ("" = the server's TIME, so
hosts with skewed clocks agree), then

  register  ARGV[3] worker id, ARGV[4] record bytes, ARGV[5] ttl ms, ARGV[6] ms a gone record
            is kept                                  -> 1 (started_ms kept from the record
                                                        there, seen_ms = now, expires_ms = now
                                                        + ttl; drops the records gone longer
                                                        than ARGV[6])
  remove    ARGV[3] worker id                        -> 1 removed, 0 was not there
  list      ARGV[3] ms a gone record is kept         -> {now_ms, id, value, id, value, ...}
                                                        (records gone longer are left out)

Invariant: a worker id is a field of KEYS[1] exactly when it is a member of KEYS[2], with the
same expires_ms.
]]

-- Redis 3.2-4 need this before TIME is followed by writes; later versions always replicate
-- a script's effects.
if redis.replicate_commands then
  redis.replicate_commands()
end

local function now_ms()
  if ARGV[2] ~= '' then
    return tonumber(ARGV[2])
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local records, expiry = KEYS[1], KEYS[2]
local command = ARGV[1]

local function prune(now, kept)
  local gone = redis.call('ZRANGEBYSCORE', expiry, '-inf', now - kept)
  if #gone > 0 then
    redis.call('HDEL', records, unpack(gone))
    redis.call('ZREM', expiry, unpack(gone))
  end
end

if command == 'register' then
  local now = now_ms()
  local id, record = ARGV[3], ARGV[4]
  local ttl, kept = tonumber(ARGV[5]), tonumber(ARGV[6])
  prune(now, kept)
  local started = now
  local old = redis.call('HGET', records, id)
  if old then
    started = tonumber(string.match(old, '^(%d+) '))
  end
  local expires = now + ttl
  redis.call('HSET', records, id, started .. ' ' .. now .. ' ' .. expires .. ' ' .. record)
  redis.call('ZADD', expiry, expires, id)
  return 1
elseif command == 'remove' then
  local id = ARGV[3]
  redis.call('ZREM', expiry, id)
  return redis.call('HDEL', records, id)
elseif command == 'list' then
  local now = now_ms()
  local kept = tonumber(ARGV[3])
  local out = {now}
  local flat = redis.call('HGETALL', records)
  for i = 1, #flat, 2 do
    local expires = tonumber(string.match(flat[i + 1], '^%d+ %d+ (%d+) '))
    if expires and expires + kept > now then
      out[#out + 1] = flat[i]
      out[#out + 1] = flat[i + 1]
    end
  end
  return out
end
return redis.error_reply('redisq workers.lua: unknown command ' .. tostring(command))
