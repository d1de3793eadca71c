-- extend: heartbeat; push the lease deadline of N jobs to now + lease ms.
-- KEYS[1..12]: see _common.lua
-- ARGV[1] lease ms   ARGV[2] n (at most MAX_BATCH), then n pairs: job id, lease token
-- Returns: the ids whose token was stale (refused, counted as stale_extends). A
--   'QUEUE_CORRUPT' / 'QUEUE_LIMIT' error (nothing written) for a key of the wrong
--   type or too many leases.
-- Changes: active (scores of held jobs only), stats stale_extends, the queue clock's stats
--          fields (see _common.lua).
-- @include _common.lua
helpers()  -- off the drain's hot path: every helper, made up front
local n = tonumber(ARGV[2])
local bad = check_count(n) or H.check({K_ACTIVE, K_LEASES, K_STATS}, {'stale_extends'})
if bad then return redis.error_reply(bad) end
local deadline = queue_now() + tonumber(ARGV[1])  -- stats was checked above
local ids = {}
for i = 1, n do ids[i] = ARGV[1 + 2 * i] end
local cur = H.chunked_read('HMGET', K_LEASES, ids)
local zargs, refused = {}, {}
for i = 1, n do
  if cur[i] and cur[i] == ARGV[2 + 2 * i] then
    zargs[#zargs + 1] = deadline
    zargs[#zargs + 1] = ids[i]
  else
    refused[#refused + 1] = ids[i]
  end
end
local i = 1
while i <= #zargs do
  local j = math.min(i + 999, #zargs)
  redis.call('ZADD', K_ACTIVE, 'XX', unpack(zargs, i, j))
  i = j + 1
end
if #refused > 0 then redis.call('HINCRBY', K_STATS, 'stale_extends', #refused) end
save_clock()
return refused
