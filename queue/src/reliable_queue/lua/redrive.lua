-- redrive: replay dead-lettered jobs; each runs again with a fresh attempt count.
-- KEYS[1..19]: see _common.lua
-- ARGV[1] wake-token cap   ARGV[2..] job ids (at most MAX_BATCH)
-- Returns: {redriven ids..., '|', skipped ids...}; skipped = not in the DLQ, or its
--          record is gone (that DLQ entry is then removed). A 'QUEUE_CORRUPT' /
--          'QUEUE_LIMIT' error (nothing written) for a wrong-type key or too many ids.
-- Changes: dead, attempts (reset), ready (a job with a flow value: the back of its key's
--          lane in its band, ADR 0033: waiting, tags), stats redriven, wake.
-- @include _common.lua
helpers()  -- off the drain's hot path: every helper, made up front
local bad = check_count(#ARGV - 1)
  or H.check({K_DEAD, K_JOBS, K_ATTEMPTS, K_INFO, K_READY, K_STATS, K_WAKE, K_WAITING,
              K_FLOW, K_TAGS}, {'redriven'})
if bad then return redis.error_reply(bad) end
local done, skipped, lost, seen = {}, {}, {}, {}
for i = 2, #ARGV do
  local id = ARGV[i]
  if seen[id] or not redis.call('ZSCORE', K_DEAD, id) then
    skipped[#skipped + 1] = id
  elseif redis.call('HEXISTS', K_JOBS, id) == 0 then
    lost[#lost + 1] = id
    skipped[#skipped + 1] = id
  else
    done[#done + 1] = id
  end
  seen[id] = true
end
-- validated: no command below can fail
chunked('ZREM', K_DEAD, lost)
H.forget(lost)
if #done > 0 then
  chunked('ZREM', K_DEAD, done)
  chunked('HDEL', K_ATTEMPTS, done)
  local back, head = H.to_waiting(done, H.chunked_read('HMGET', K_FLOW, done), false)
  chunked('LPUSH', K_READY, back)
  if #head > 0 then H.push_head(head) end
  redis.call('HINCRBY', K_STATS, 'redriven', #done)
  H.wake(#done, tonumber(ARGV[1]))
end
done[#done + 1] = '|'
for _, id in ipairs(skipped) do done[#done + 1] = id end
return done
