-- extend: heartbeat; push the lease deadline of N jobs to now + lease ms.
-- KEYS[1..12]: see _common.lua
-- ARGV[1] lease ms   ARGV[2] n, then n pairs: job id, lease token
-- Returns: the ids whose token was stale (refused, counted as stale_extends).
-- Changes: active (scores of held jobs only), stats stale_extends.
-- @include _common.lua
local deadline = now_ms() + tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local ids = {}
for i = 1, n do ids[i] = ARGV[1 + 2 * i] end
local cur = redis.call('HMGET', K_LEASES, unpack(ids))
local zargs, refused = {}, {}
for i = 1, n do
  if cur[i] and cur[i] == ARGV[2 + 2 * i] then
    zargs[#zargs + 1] = deadline
    zargs[#zargs + 1] = ids[i]
  else
    refused[#refused + 1] = ids[i]
  end
end
if #zargs > 0 then redis.call('ZADD', K_ACTIVE, 'XX', unpack(zargs)) end
if #refused > 0 then redis.call('HINCRBY', K_STATS, 'stale_extends', #refused) end
return refused
