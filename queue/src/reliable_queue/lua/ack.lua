-- ack: record success of N leased jobs; stale lease tokens are refused.
-- KEYS[1..12]: see _common.lua
-- ARGV[1] retention ms (0 = delete the record now)
-- ARGV[2] n (at most MAX_BATCH), then n pairs: job id, lease token
-- Returns: {acked ids..., '|', refused ids...}  (a '|' separator; ids never contain '|').
--   A 'QUEUE_CORRUPT' / 'QUEUE_LIMIT' error (nothing written) for a key of the wrong
--   type or too many leases.
-- Changes: active, leases, done (or jobs/attempts/info deleted), stats succeeded /
--          stale_refused; trims done records older than the retention window (bounded).
-- @include _common.lua
local retention, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local bad = check_count(n)
  or check({K_ACTIVE, K_DONE, K_JOBS, K_ATTEMPTS, K_INFO, K_STATS},
           {'succeeded', 'stale_refused'})
if bad then return redis.error_reply(bad) end
local ids = {}
for i = 1, n do ids[i] = ARGV[1 + 2 * i] end
-- the current tokens; this read (n <= MAX_BATCH: one HMGET) is the type check of leases
local cur = {}
if n > 0 then cur = redis.pcall('HMGET', K_LEASES, unpack(ids, 1, n)) end
if cur['err'] then return redis.error_reply(corrupt(K_LEASES, 'hash')) end
local now = now_ms()
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
-- validated: no command below can fail
if #ok > 0 then
  chunked('ZREM', K_ACTIVE, ok)
  chunked('HDEL', K_LEASES, ok)
  if retention > 0 then
    chunked('ZADD', K_DONE, zdone)
  else
    forget(ok)
  end
  redis.call('HINCRBY', K_STATS, 'succeeded', #ok)
end
if #refused > 0 then redis.call('HINCRBY', K_STATS, 'stale_refused', #refused) end
-- retention: drop finished records past the window, a bounded amount per call
trim_done(now, retention, math.min(2 * n + 100, TRIM_STEP))
ok[#ok + 1] = '|'
for _, id in ipairs(refused) do ok[#ok + 1] = id end
return ok
