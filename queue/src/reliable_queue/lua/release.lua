-- release: hand leased jobs back unrun (graceful shutdown), or a batch whose shared
-- handler call timed out (ADR 0005); the delivery is not counted as an attempt.
-- KEYS[1..19]: see _common.lua
-- ARGV[1] wake-token cap   ARGV[2] n (at most MAX_BATCH), then n pairs: job id, lease token
-- ARGV[3 + 2n] (optional) failure info JSON recorded for every job handed back (a
--   timed-out batch: reason timed_out, so each job is a suspect, leased alone)
-- Returns: number of jobs handed back (stale tokens are skipped). A 'QUEUE_CORRUPT' /
--   'QUEUE_LIMIT' error (nothing written) for a key of the wrong type or too many leases.
-- Changes: active, leases, running (their slots), attempts (-1), ready (to the head of
--          the line; a job with a flow value to the front of its band, ADR 0033:
--          waiting, tags), wake, info (only with the optional ARGV).
-- @include _common.lua
helpers()  -- off the drain's hot path: every helper, made up front
local n = tonumber(ARGV[2])
local bad = check_count(n)
  or H.check({K_ACTIVE, K_LEASES, K_ATTEMPTS, K_READY, K_INFO, K_STATS, K_WAKE, K_WAITING,
              K_FLOW, K_TAGS, K_RUNNING}, {'released'})
if bad then return redis.error_reply(bad) end
local ids = {}
for i = 1, n do ids[i] = ARGV[1 + 2 * i] end
local cur = H.chunked_read('HMGET', K_LEASES, ids)
local atts = H.chunked_read('HMGET', K_ATTEMPTS, ids)
local back, aargs, seen = {}, {}, {}
for i = 1, n do
  local id = ids[i]
  if cur[i] and cur[i] == ARGV[2 + 2 * i] and not seen[id] then
    seen[id] = true
    back[#back + 1] = id
    aargs[#aargs + 1] = id
    aargs[#aargs + 1] = math.max((tonumber(atts[i]) or 1) - 1, 0)
  end
end
-- validated: no command below can fail
if #back > 0 then
  local flows = H.chunked_read('HMGET', K_FLOW, back)
  chunked('ZREM', K_ACTIVE, back)
  chunked('HDEL', K_LEASES, back)
  H.unrun(back, flows)
  chunked('HSET', K_ATTEMPTS, aargs)
  local info = ARGV[3 + 2 * n]
  if info then
    local iargs = {}
    for _, id in ipairs(back) do
      iargs[#iargs + 1] = id
      iargs[#iargs + 1] = info
    end
    chunked('HSET', K_INFO, iargs)
  end
  local _, head = H.to_waiting(back, flows, true)
  if #head > 0 then H.push_head(head) end
  redis.call('HINCRBY', K_STATS, 'released', #back)
  H.wake(#back, tonumber(ARGV[1]))
end
return #back
