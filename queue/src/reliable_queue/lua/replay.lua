-- replay: put finished jobs back on the queue, as if their acks had never happened.
-- A fault-injection tool: it reproduces what an AOF replay after a crash can do to
-- jobs that had already finished (they run again), so a test or chaos run can show
-- that the handlers absorb the redelivery. Only jobs still in `done` (their record
-- kept by the retention window) can be replayed.
-- KEYS[1..19]: see _common.lua
-- ARGV[1] wake-token cap   ARGV[2..] job ids (at most MAX_BATCH)
-- Returns: {replayed ids..., '|', skipped ids...}; skipped = not in `done`, or its
--          record is gone (that `done` entry is then removed). A 'QUEUE_CORRUPT' /
--          'QUEUE_LIMIT' error (nothing written) for a wrong-type key or too many ids.
-- Changes: done, attempts (reset: the rerun starts at attempt 1), info, ready (a job
--          with a flow value: its band, ADR 0033: waiting, tags), stats replayed, wake.
-- @include _common.lua
helpers()  -- off the drain's hot path: every helper, made up front
local bad = check_count(#ARGV - 1)
  or H.check({K_DONE, K_JOBS, K_ATTEMPTS, K_INFO, K_READY, K_STATS, K_WAKE, K_WAITING,
              K_FLOW, K_TAGS}, {'replayed'})
if bad then return redis.error_reply(bad) end
local replayed, skipped, lost, seen = {}, {}, {}, {}
for i = 2, #ARGV do
  local id = ARGV[i]
  if seen[id] or not redis.call('ZSCORE', K_DONE, id) then
    skipped[#skipped + 1] = id
  elseif redis.call('HEXISTS', K_JOBS, id) == 0 then
    lost[#lost + 1] = id
    skipped[#skipped + 1] = id
  else
    replayed[#replayed + 1] = id
  end
  seen[id] = true
end
-- validated: no command below can fail
chunked('ZREM', K_DONE, lost)
H.forget(lost)
if #replayed > 0 then
  chunked('ZREM', K_DONE, replayed)
  chunked('HDEL', K_ATTEMPTS, replayed)
  chunked('HDEL', K_INFO, replayed)
  local back, head = H.to_waiting(replayed, H.chunked_read('HMGET', K_FLOW, replayed), false)
  chunked('LPUSH', K_READY, back)
  if #head > 0 then H.push_head(head) end
  redis.call('HINCRBY', K_STATS, 'replayed', #replayed)
  H.wake(#replayed, tonumber(ARGV[1]))
end
replayed[#replayed + 1] = '|'
for _, id in ipairs(skipped) do replayed[#replayed + 1] = id end
return replayed
