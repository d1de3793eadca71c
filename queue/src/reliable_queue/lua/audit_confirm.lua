-- audit_confirm: decide which candidate ids are orphans (a record in no structure),
-- and with repair put them back on ready.
-- KEYS[1..12]: see _common.lua
-- ARGV[1] repair (1 = put orphans back, 0 = only report)   ARGV[2] wake-token cap
-- ARGV[3] info JSON to record for a repaired job (reason orphan_repaired)
-- ARGV[4..] candidate ids (at most 50: the ready check is one LPOS per candidate
--           that is in no sorted set)
-- Returns: the ids that are orphans (repaired when ARGV[1] is 1). A 'QUEUE_CORRUPT' /
--   'QUEUE_LIMIT' error (nothing written) for a key of the wrong type or too many ids.
-- Changes (repair only): ready (LPUSH; the attempt count is left as it is), info,
--          stats orphans_repaired, wake.
-- @include _common.lua
helpers()  -- off the drain's hot path: every helper, made up front
local n = #ARGV - 3
if n > 50 then return redis.error_reply('QUEUE_LIMIT at most 50 candidates per call') end
local bad = H.check({K_READY, K_DELAYED, K_ACTIVE, K_JOBS, K_DEAD, K_DONE, K_INFO, K_STATS,
                   K_WAKE}, {'orphans_repaired'})
if bad then return redis.error_reply(bad) end
local orphans, seen = {}, {}
for i = 4, #ARGV do
  local id = ARGV[i]
  if not seen[id] and redis.call('HEXISTS', K_JOBS, id) == 1
     and not redis.call('ZSCORE', K_DELAYED, id) and not redis.call('ZSCORE', K_ACTIVE, id)
     and not redis.call('ZSCORE', K_DEAD, id) and not redis.call('ZSCORE', K_DONE, id)
     and not redis.call('LPOS', K_READY, id) then
    orphans[#orphans + 1] = id
  end
  seen[id] = true
end
-- validated: no command below can fail
if ARGV[1] == '1' and #orphans > 0 then
  for _, id in ipairs(orphans) do
    local prev = redis.call('HGET', K_INFO, id)
    local info = ARGV[3]
    if prev then info = string.sub(info, 1, -2) .. ',"previous":' .. cjson.encode(prev) .. '}' end
    redis.call('HSET', K_INFO, id, info)
  end
  chunked('LPUSH', K_READY, orphans)
  redis.call('HINCRBY', K_STATS, 'orphans_repaired', #orphans)
  H.wake(#orphans, tonumber(ARGV[2]))
end
return orphans
