-- dead: move a leased job to the dead-letter queue (permanent error, retries
-- exhausted, invalid payload or record, unknown task).
-- KEYS[1..19]: see _common.lua
-- ARGV[1] job id   ARGV[2] lease token   ARGV[3] reason   ARGV[4] failure info JSON
-- ARGV[5] dlq max size   ARGV[6] dlq max age ms
-- Returns: 1 if recorded, 0 if the token was stale (refused, counted). A
--   'QUEUE_CORRUPT' error (nothing written) for a key of the wrong type.
-- Changes: active, leases, running (its slot, ADR 0033), dead, info (its flow value is
--          kept: a redrive puts it back in its band), stats dead / dead:<reason> /
--          dlq_dropped;
--          trims the DLQ by age and size, at most TRIM_STEP entries; the queue clock's
--          stats fields (see _common.lua).
-- @include _common.lua
helpers()  -- off the drain's hot path: every helper, made up front
local bad = H.check({K_LEASES, K_ACTIVE, K_DEAD, K_INFO, K_JOBS, K_ATTEMPTS, K_STATS,
                     K_RUNNING, K_FLOW},
                  {'stale_refused', 'dead', 'dead:' .. ARGV[3], 'dlq_dropped'})
if bad then return redis.error_reply(bad) end
local id, token = ARGV[1], ARGV[2]
if redis.call('HGET', K_LEASES, id) ~= token then
  redis.call('HINCRBY', K_STATS, 'stale_refused', 1)
  return 0
end
-- validated: no command below can fail
local now = queue_now()  -- stats was checked above
redis.call('ZREM', K_ACTIVE, id)
redis.call('HDEL', K_LEASES, id)
H.unrun({id})
H.to_dead(id, ARGV[3], ARGV[4], now)
H.trim_dead(now, tonumber(ARGV[5]), tonumber(ARGV[6]))
save_clock()
return 1
