-- nack: a leased job failed and will run again after a backoff.
-- KEYS[1..19]: see _common.lua
-- ARGV[1] job id   ARGV[2] lease token   ARGV[3] delay ms (0 = ready now)
-- ARGV[4] failure info JSON   ARGV[5] wake-token cap
-- Returns: 1 if recorded, 0 if the token was stale (refused, counted). A
--   'QUEUE_CORRUPT' error (nothing written) for a key of the wrong type.
-- Changes: active, leases, delayed (or the back of the line: ready, or the back of its
--          key's lane in its band for a job with a flow value, ADR 0033: waiting,
--          tags), running (its slot), info (which also ends its throttle count, ADR
--          0034), stats retried / stale_refused, wake, the queue clock's stats fields
--          (see _common.lua).
-- @include _common.lua
helpers()  -- off the drain's hot path: every helper, made up front
local bad = H.check({K_LEASES, K_ACTIVE, K_INFO, K_DELAYED, K_READY, K_STATS, K_WAKE,
                     K_WAITING, K_FLOW, K_TAGS, K_RUNNING}, {'retried', 'stale_refused'})
if bad then return redis.error_reply(bad) end
local id, token, delay = ARGV[1], ARGV[2], tonumber(ARGV[3])
if redis.call('HGET', K_LEASES, id) ~= token then
  redis.call('HINCRBY', K_STATS, 'stale_refused', 1)
  return 0
end
-- validated: no command below can fail
local now = queue_now()  -- stats was checked above
local flows = {redis.call('HGET', K_FLOW, id)}
redis.call('ZREM', K_ACTIVE, id)
redis.call('HDEL', K_LEASES, id)
H.unrun({id}, flows)
redis.call('HSET', K_INFO, id, ARGV[4])
if delay > 0 then
  redis.call('ZADD', K_DELAYED, now + delay, id)
else
  local back = H.to_waiting({id}, flows, false)  -- due now: the back of the line
  if #back > 0 then redis.call('LPUSH', K_READY, id) end
end
redis.call('HINCRBY', K_STATS, 'retried', 1)
H.wake(1, tonumber(ARGV[5]))
save_clock()
return 1
