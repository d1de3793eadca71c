-- redrive: replay dead-lettered jobs; each runs again with a fresh attempt count.
-- KEYS[1..12]: see _common.lua
-- ARGV[1] wake-token cap   ARGV[2..] job ids
-- Returns: {redriven ids..., '|', skipped ids...}; skipped = not in the DLQ, or its
--          record is gone (that DLQ entry is then removed).
-- Changes: dead, attempts (reset), ready, stats redriven, wake.
-- @include _common.lua
local done, skipped = {}, {}
for i = 2, #ARGV do
  local id = ARGV[i]
  if not redis.call('ZSCORE', K_DEAD, id) then
    skipped[#skipped + 1] = id
  elseif redis.call('HEXISTS', K_JOBS, id) == 0 then
    redis.call('ZREM', K_DEAD, id)
    forget({id})
    skipped[#skipped + 1] = id
  else
    redis.call('ZREM', K_DEAD, id)
    redis.call('HDEL', K_ATTEMPTS, id)
    redis.call('LPUSH', K_READY, id)
    done[#done + 1] = id
  end
end
if #done > 0 then
  redis.call('HINCRBY', K_STATS, 'redriven', #done)
  wake(#done, tonumber(ARGV[1]))
end
done[#done + 1] = '|'
for _, id in ipairs(skipped) do done[#done + 1] = id end
return done
