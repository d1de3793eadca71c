-- throttle: a leased job's run was throttled by a downstream (ADR 0034). Within its
-- budget the job goes back to the front of its band after a delay, its delivery not
-- counted as an attempt and its throttle count (kept in its failure info, so any other
-- end of the attempt resets it) one up; past the budget the attempt is an ordinary
-- failure: retried after a backoff (charged), or dead-lettered as retries_exhausted.
-- KEYS[1..19]: see _common.lua
-- ARGV[1] job id   ARGV[2] lease token   ARGV[3] delay ms (0..MAX_DELAY_MS)
-- ARGV[4] throttles allowed per attempt (0..10000)
-- ARGV[5] failure info JSON of a throttle (a JSON object; `throttles` is set here)
-- ARGV[6] past the budget: a retry's delay ms, or -1 to dead-letter
-- ARGV[7] failure info JSON past the budget
-- ARGV[8] wake-token cap   ARGV[9] dlq max size   ARGV[10] dlq max age ms
-- Returns: 1 throttled, 2 retried (past the budget), 3 dead-lettered (past the budget),
--   0 if the token was stale (refused, counted). A 'QUEUE_CORRUPT' / 'QUEUE_LIMIT'
--   error (nothing written) for a key of the wrong type or a bad argument.
-- Changes: active, leases, running (its slot), info, attempts (-1 when throttled),
--          delayed (with the front flag on its flow value) or the front of its band
--          (delay 0), or as nack / dead past the budget; stats throttled / retried /
--          dead / dead:retries_exhausted / dlq_dropped / stale_refused, wake, the queue
--          clock's stats fields (see _common.lua).
-- @include _common.lua
helpers()  -- off the drain's hot path: every helper, made up front
local MAX_DELAY_MS = 316224000000  -- ten years (limits.MAX_DELAY_SECONDS)
local id, token = ARGV[1], ARGV[2]
local delay, budget, fallback = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[6])
if not (delay and delay >= 0 and delay <= MAX_DELAY_MS and budget and budget >= 0
        and budget <= 10000 and fallback and fallback >= -1 and fallback <= MAX_DELAY_MS) then
  return redis.error_reply('QUEUE_LIMIT throttle arguments out of range')
end
local ok, info = pcall(cjson.decode, ARGV[5])
if not ok or type(info) ~= 'table' then
  return redis.error_reply('QUEUE_LIMIT a throttle failure info is not a JSON object')
end
local bad = H.check({K_LEASES, K_ACTIVE, K_INFO, K_DELAYED, K_READY, K_STATS, K_WAKE,
                     K_WAITING, K_FLOW, K_TAGS, K_RUNNING, K_ATTEMPTS, K_DEAD, K_JOBS},
                    {'throttled', 'retried', 'stale_refused', 'dead',
                     'dead:retries_exhausted', 'dlq_dropped'})
if bad then return redis.error_reply(bad) end
if redis.call('HGET', K_LEASES, id) ~= token then
  redis.call('HINCRBY', K_STATS, 'stale_refused', 1)
  return 0
end
-- this attempt's throttles so far: its failure info's, while that says throttled
local used = 0
local prev = redis.call('HGET', K_INFO, id)
if prev and string.find(prev, 'throttled', 1, true) then
  local okp, data = pcall(cjson.decode, prev)
  if okp and type(data) == 'table' and data['reason'] == 'throttled' then
    used = math.min(math.max(math.floor(tonumber(data['throttles']) or 0), 0), 10000)
  end
end
local text = nil
if used < budget then
  info['throttles'] = used + 1
  local oke, t = pcall(cjson.encode, info)
  if not oke then
    return redis.error_reply('QUEUE_LIMIT a throttle failure info cannot be encoded')
  end
  text = t
end
-- validated: no command below can fail
local now = queue_now()  -- stats was checked above
local flows = {redis.call('HGET', K_FLOW, id)}
redis.call('ZREM', K_ACTIVE, id)
redis.call('HDEL', K_LEASES, id)
H.unrun({id}, flows)
local result
if text then
  local att = tonumber(redis.call('HGET', K_ATTEMPTS, id)) or 1
  redis.call('HSET', K_ATTEMPTS, id, math.max(att - 1, 0))  -- not counted
  redis.call('HSET', K_INFO, id, text)
  if delay > 0 then
    -- due later, then at the front of its band: the flow value's front flag says so
    local v = flows[1]
    if not v then
      v = H.DEFAULT_BAND .. '|'
    elseif string.byte(v, 1) == 102 then
      v = string.sub(v, 2)
    end
    redis.call('HSET', K_FLOW, id, 'f' .. v)
    redis.call('ZADD', K_DELAYED, now + delay, id)
  else
    local _, head = H.to_waiting({id}, flows, true)
    if #head > 0 then H.push_head(head) end
  end
  redis.call('HINCRBY', K_STATS, 'throttled', 1)
  result = 1
else
  redis.call('HSET', K_INFO, id, ARGV[7])
  if fallback < 0 then
    H.to_dead(id, 'retries_exhausted', ARGV[7], now)
    H.trim_dead(now, tonumber(ARGV[9]), tonumber(ARGV[10]))
    result = 3
  else
    if fallback > 0 then
      redis.call('ZADD', K_DELAYED, now + fallback, id)
    else
      local back = H.to_waiting({id}, flows, false)
      if #back > 0 then redis.call('LPUSH', K_READY, id) end
    end
    redis.call('HINCRBY', K_STATS, 'retried', 1)
    result = 2
  end
end
H.wake(1, tonumber(ARGV[8]))
save_clock()
return result
