-- replay: put finished jobs back on the queue, as if their acks had never happened.
-- A fault-injection tool: it reproduces what an AOF replay after a crash can do to
-- jobs that had already finished (they run again), so a test or chaos run can show
-- that the handlers absorb the redelivery. Only jobs still in `done` (their record
-- kept by the retention window) can be replayed.
-- KEYS[1..12]: see _common.lua
-- ARGV[1] wake-token cap   ARGV[2..] job ids
-- Returns: {replayed ids..., '|', skipped ids...}; skipped = not in `done`, or its
--          record is gone (that `done` entry is then removed).
-- Changes: done, attempts (reset: the rerun starts at attempt 1), info, ready,
--          stats replayed, wake.
-- @include _common.lua
local replayed, skipped = {}, {}
for i = 2, #ARGV do
  local id = ARGV[i]
  if not redis.call('ZSCORE', K_DONE, id) then
    skipped[#skipped + 1] = id
  elseif redis.call('HEXISTS', K_JOBS, id) == 0 then
    redis.call('ZREM', K_DONE, id)
    forget({id})
    skipped[#skipped + 1] = id
  else
    redis.call('ZREM', K_DONE, id)
    redis.call('HDEL', K_ATTEMPTS, id)
    redis.call('HDEL', K_INFO, id)
    redis.call('LPUSH', K_READY, id)
    replayed[#replayed + 1] = id
  end
end
if #replayed > 0 then
  redis.call('HINCRBY', K_STATS, 'replayed', #replayed)
  wake(#replayed, tonumber(ARGV[1]))
end
replayed[#replayed + 1] = '|'
for _, id in ipairs(skipped) do replayed[#replayed + 1] = id end
return replayed
