-- release: hand leased jobs back unrun (graceful shutdown); the delivery is not
-- counted as an attempt.
-- KEYS[1..12]: see _common.lua
-- ARGV[1] wake-token cap   ARGV[2] n, then n pairs: job id, lease token
-- Returns: number of jobs handed back (stale tokens are skipped).
-- Changes: active, leases, attempts (-1), ready (to the head of the line), wake.
-- @include _common.lua
local n = tonumber(ARGV[2])
local back = {}
for i = 1, n do
  local id = ARGV[1 + 2 * i]
  if redis.call('HGET', K_LEASES, id) == ARGV[2 + 2 * i] then
    redis.call('ZREM', K_ACTIVE, id)
    redis.call('HDEL', K_LEASES, id)
    redis.call('HINCRBY', K_ATTEMPTS, id, -1)
    back[#back + 1] = id
  end
end
if #back > 0 then
  push_head(back)
  redis.call('HINCRBY', K_STATS, 'released', #back)
  wake(#back, tonumber(ARGV[1]))
end
return #back
