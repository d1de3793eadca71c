-- dead: move a leased job to the dead-letter queue (permanent error, retries
-- exhausted, invalid payload, unknown task).
-- KEYS[1..12]: see _common.lua
-- ARGV[1] job id   ARGV[2] lease token   ARGV[3] reason   ARGV[4] failure info JSON
-- ARGV[5] dlq max size   ARGV[6] dlq max age ms
-- Returns: 1 if recorded, 0 if the token was stale (refused, counted).
-- Changes: active, leases, dead, info, stats dead / dead:<reason> / dlq_dropped.
-- @include _common.lua
local id, token = ARGV[1], ARGV[2]
if redis.call('HGET', K_LEASES, id) ~= token then
  redis.call('HINCRBY', K_STATS, 'stale_refused', 1)
  return 0
end
local now = now_ms()
redis.call('ZREM', K_ACTIVE, id)
redis.call('HDEL', K_LEASES, id)
to_dead(id, ARGV[3], ARGV[4], now, tonumber(ARGV[5]), tonumber(ARGV[6]))
return 1
