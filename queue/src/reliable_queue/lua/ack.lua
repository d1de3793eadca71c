-- ack: record success of N leased jobs; stale lease tokens are refused.
-- KEYS[1..12]: see _common.lua
-- ARGV[1] retention ms (0 = delete the record now)
-- ARGV[2] n, then n pairs: job id, lease token
-- Returns: {acked ids..., '|', refused ids...}  (a '|' separator; ids never contain '|')
-- Changes: active, leases, done (or jobs/attempts/info deleted), stats succeeded /
--          stale_refused; trims done records older than the retention window.
-- @include _common.lua
local now = now_ms()
local retention, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local ids = {}
for i = 1, n do ids[i] = ARGV[1 + 2 * i] end
local cur = redis.call('HMGET', K_LEASES, unpack(ids))
local ok, refused, zdone = {}, {}, {}
for i = 1, n do
  if cur[i] and cur[i] == ARGV[2 + 2 * i] then
    ok[#ok + 1] = ids[i]
    zdone[#zdone + 1] = now
    zdone[#zdone + 1] = ids[i]
  else
    refused[#refused + 1] = ids[i]
  end
end
if #ok > 0 then
  chunked('ZREM', K_ACTIVE, ok)
  chunked('HDEL', K_LEASES, ok)
  if retention > 0 then
    redis.call('ZADD', K_DONE, unpack(zdone))
  else
    forget(ok)
  end
  redis.call('HINCRBY', K_STATS, 'succeeded', #ok)
end
if #refused > 0 then redis.call('HINCRBY', K_STATS, 'stale_refused', #refused) end
-- retention: drop finished records past the window, a bounded amount per call
local old = redis.call('ZRANGEBYSCORE', K_DONE, '-inf', now - retention, 'LIMIT', 0, 2 * n + 100)
if #old > 0 then
  chunked('ZREM', K_DONE, old)
  forget(old)
end
ok[#ok + 1] = '|'
for _, id in ipairs(refused) do ok[#ok + 1] = id end
return ok
