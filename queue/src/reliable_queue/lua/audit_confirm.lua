-- audit_confirm: decide which candidate ids are orphans (a record in no structure),
-- and with repair put them back to wait; or (ARGV[1] 'stale') drop flow-control entries
-- the audit found stale, when they still are (ADR 0033).
-- KEYS[1..19]: see _common.lua
-- ARGV[1] repair (1 = put orphans back, 0 = only report)   ARGV[2] wake-token cap
-- ARGV[3] info JSON to record for a repaired job (reason orphan_repaired)
-- ARGV[4..] candidate ids (at most 50: the ready check is one LPOS per candidate
--           that is in no sorted set)
-- Or: ARGV[1] 'stale', ARGV[2] what: 'flow' (ids: a flow value whose record is gone, or
--   that is malformed), 'running' (slot members: not active, or not of its job's key),
--   'tags' (field, value pairs: a key's last tag that no waiting job carries, deleted
--   when the value is still the one seen), 'waiting' (ids: a waiting member without a
--   flow value gets "<its band>|"); ARGV[3..] the entries (at most MAX_BATCH).
-- Returns: the ids that are orphans (repaired when ARGV[1] is 1); for 'stale', the
--   entries repaired (a tags entry as its field). A 'QUEUE_CORRUPT' / 'QUEUE_LIMIT'
--   error (nothing written) for a key of the wrong type or too many ids.
-- Changes (repair only): ready or waiting/tags (a job with a flow value, in its band;
--          the attempt count is left as it is), info, stats orphans_repaired, wake;
--          'stale': flow, running, tags.
-- @include _common.lua
helpers()  -- off the drain's hot path: every helper, made up front
local bad = H.check({K_READY, K_DELAYED, K_ACTIVE, K_JOBS, K_DEAD, K_DONE, K_INFO, K_STATS,
                   K_WAKE, K_WAITING, K_FLOW, K_TAGS, K_RUNNING}, {'orphans_repaired'})
if bad then return redis.error_reply(bad) end
if ARGV[1] == 'stale' then
  local what, done = ARGV[2], {}
  bad = check_count(#ARGV - 2)
  if bad then return redis.error_reply(bad) end
  if what == 'flow' then
    for i = 3, #ARGV do
      local id = ARGV[i]
      local v = redis.call('HGET', K_FLOW, id)
      if v and (redis.call('HEXISTS', K_JOBS, id) == 0 or not H.parse_flow(v)) then
        redis.call('HDEL', K_FLOW, id)
        done[#done + 1] = id
      end
    end
  elseif what == 'running' then
    for i = 3, #ARGV do
      local m = ARGV[i]
      local at = string.find(m, '\0', 1, true)
      local ok = false
      if at then
        local id = string.sub(m, at + 1)
        local _, k = H.parse_flow(redis.call('HGET', K_FLOW, id))
        ok = redis.call('ZSCORE', K_ACTIVE, id) and k == string.sub(m, 1, at - 1)
      end
      if not ok and redis.call('ZREM', K_RUNNING, m) == 1 then done[#done + 1] = m end
    end
  elseif what == 'tags' then
    for i = 3, #ARGV - 1, 2 do
      if redis.call('HGET', K_TAGS, ARGV[i]) == ARGV[i + 1] then
        redis.call('HDEL', K_TAGS, ARGV[i])
        done[#done + 1] = ARGV[i]
      end
    end
  elseif what == 'waiting' then
    for i = 3, #ARGV do
      local id = ARGV[i]
      local score = redis.call('ZSCORE', K_WAITING, id)
      if score and not H.parse_flow(redis.call('HGET', K_FLOW, id)) then
        local b = math.min(math.max(math.floor(tonumber(score) / H.BAND), 0), 9)
        redis.call('HSET', K_FLOW, id, b .. '|')
        done[#done + 1] = id
      end
    end
  else
    return redis.error_reply('QUEUE_LIMIT unknown stale kind ' .. tostring(what))
  end
  return done
end
local n = #ARGV - 3
if n > 50 then return redis.error_reply('QUEUE_LIMIT at most 50 candidates per call') end
local orphans, seen = {}, {}
for i = 4, #ARGV do
  local id = ARGV[i]
  if not seen[id] and redis.call('HEXISTS', K_JOBS, id) == 1
     and not redis.call('ZSCORE', K_DELAYED, id) and not redis.call('ZSCORE', K_ACTIVE, id)
     and not redis.call('ZSCORE', K_DEAD, id) and not redis.call('ZSCORE', K_DONE, id)
     and not redis.call('ZSCORE', K_WAITING, id) and not redis.call('LPOS', K_READY, id) then
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
  local back, head = H.to_waiting(orphans, H.chunked_read('HMGET', K_FLOW, orphans), false)
  chunked('LPUSH', K_READY, back)
  if #head > 0 then H.push_head(head) end
  redis.call('HINCRBY', K_STATS, 'orphans_repaired', #orphans)
  H.wake(#orphans, tonumber(ARGV[2]))
end
return orphans
