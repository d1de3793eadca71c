-- purge: delete dead-lettered jobs for good.
-- KEYS[1..12]: see _common.lua
-- ARGV[1..] job ids
-- Returns: number of DLQ entries removed.
-- Changes: dead, jobs, attempts, info, stats purged.
-- @include _common.lua
local gone = {}
for i = 1, #ARGV do
  if redis.call('ZREM', K_DEAD, ARGV[i]) == 1 then gone[#gone + 1] = ARGV[i] end
end
forget(gone)
if #gone > 0 then redis.call('HINCRBY', K_STATS, 'purged', #gone) end
return #gone
