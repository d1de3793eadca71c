-- purge: delete dead-lettered jobs for good.
-- KEYS[1..19]: see _common.lua
-- ARGV[1..] job ids (at most MAX_BATCH)
-- Returns: number of DLQ entries removed. A 'QUEUE_CORRUPT' / 'QUEUE_LIMIT' error
--   (nothing written) for a key of the wrong type or too many ids.
-- Changes: dead, jobs, attempts, info, flow, stats purged.
-- @include _common.lua
helpers()  -- off the drain's hot path: every helper, made up front
local bad = check_count(#ARGV)
  or H.check({K_DEAD, K_JOBS, K_ATTEMPTS, K_INFO, K_STATS, K_FLOW}, {'purged'})
if bad then return redis.error_reply(bad) end
local gone, seen = {}, {}
for i = 1, #ARGV do
  local id = ARGV[i]
  if not seen[id] and redis.call('ZSCORE', K_DEAD, id) then gone[#gone + 1] = id end
  seen[id] = true
end
-- validated: no command below can fail
chunked('ZREM', K_DEAD, gone)
H.forget(gone)
if #gone > 0 then redis.call('HINCRBY', K_STATS, 'purged', #gone) end
return #gone
