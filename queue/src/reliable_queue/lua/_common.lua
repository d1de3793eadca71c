-- Shared fragment, included by the state-changing scripts (never run alone).
-- Key order (KEYS[1..12]) used by every script that includes this file:
--   1 ready    LIST  job ids waiting (LPUSH in, RPOP out)
--   2 delayed  ZSET  job id -> due ms
--   3 active   ZSET  job id -> lease deadline ms
--   4 jobs     HASH  job id -> JSON record {t,p,e,m,k}
--   5 attempts HASH  job id -> deliveries so far
--   6 leases   HASH  job id -> lease token
--   7 dead     ZSET  job id -> dead-lettered at ms
--   8 info     HASH  job id -> JSON of the last failure
--   9 done     ZSET  job id -> finished at ms
--  10 stats    HASH  counters
--  11 seq      STRING fencing-token sequence
--  12 wake     LIST  wake-up tokens for idle workers
if redis.replicate_commands then pcall(redis.replicate_commands) end

local K_READY, K_DELAYED, K_ACTIVE, K_JOBS = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local K_ATTEMPTS, K_LEASES, K_DEAD, K_INFO = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local K_DONE, K_STATS, K_SEQ, K_WAKE = KEYS[9], KEYS[10], KEYS[11], KEYS[12]

-- Redis server time in ms: every deadline uses it, so worker clock skew cannot matter.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Call a variadic command over a list in chunks (Lua's unpack limit is ~8000).
local function chunked(cmd, key, list, from)
  local n = #list
  local i = from or 1
  while i <= n do
    local j = math.min(i + 3999, n)
    redis.call(cmd, key, unpack(list, i, j))
    i = j + 1
  end
end

-- Put ids back at the head of the line (RPOP end), the first of them to be popped first.
local function push_head(ids)
  local rev = {}
  for i = #ids, 1, -1 do rev[#rev + 1] = ids[i] end
  chunked('RPUSH', K_READY, rev)
end

local function wake(count, cap)
  if count <= 0 then return end
  local n = math.min(count, cap)
  local t = {}
  for i = 1, n do t[i] = '1' end
  redis.call('LPUSH', K_WAKE, unpack(t))
  redis.call('LTRIM', K_WAKE, 0, cap - 1)
end

-- Forget every trace of the given job ids (record, attempts, failure info).
local function forget(ids)
  if #ids == 0 then return end
  chunked('HDEL', K_JOBS, ids)
  chunked('HDEL', K_ATTEMPTS, ids)
  chunked('HDEL', K_INFO, ids)
end

-- Drop dead-letter entries beyond the age and size bounds; dropping is counted.
local function trim_dead(now, max_size, max_age_ms)
  local old = redis.call('ZRANGEBYSCORE', K_DEAD, '-inf', now - max_age_ms, 'LIMIT', 0, 1000)
  local dropped = #old
  if dropped > 0 then
    chunked('ZREM', K_DEAD, old)
    forget(old)
  end
  local excess = redis.call('ZCARD', K_DEAD) - max_size
  if excess > 0 then
    local ids = redis.call('ZRANGE', K_DEAD, 0, excess - 1)
    chunked('ZREM', K_DEAD, ids)
    forget(ids)
    dropped = dropped + #ids
  end
  if dropped > 0 then redis.call('HINCRBY', K_STATS, 'dlq_dropped', dropped) end
end

-- Move a job (already out of active/leases) to the dead-letter queue.
local function to_dead(id, reason, info_json, now, max_size, max_age_ms)
  redis.call('ZADD', K_DEAD, now, id)
  redis.call('HSET', K_INFO, id, info_json)
  redis.call('HINCRBY', K_STATS, 'dead', 1)
  redis.call('HINCRBY', K_STATS, 'dead:' .. reason, 1)
  trim_dead(now, max_size, max_age_ms)
end

-- Max attempts of a job from its record; the default when the record is unreadable.
local function max_attempts_of(id, default)
  local rec = redis.call('HGET', K_JOBS, id)
  if not rec then return default end
  local ok, data = pcall(cjson.decode, rec)
  if ok and type(data) == 'table' and tonumber(data['m']) then return tonumber(data['m']) end
  return default
end
