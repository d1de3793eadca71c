-- enqueue: add N jobs atomically, each with an optional idempotency key.
-- KEYS[1..12]: see _common.lua; KEYS[12+i]: the i-th idempotency key STRING.
-- ARGV[1] n jobs (at most MAX_BATCH)
-- ARGV[2] idempotency window, ms (>= 1)
-- ARGV[3] wake-token cap
-- then 5 per job: id, record JSON, delay ms (0 = none), run_at ms (0 = none),
--                 index of its idempotency key among KEYS[13..] (0 = none; negative =
--                 the same index, and a key whose job record is gone is replaced)
-- Returns: a list of n job ids; for a duplicate, the id of the first job. A
--   'QUEUE_CORRUPT' / 'QUEUE_LIMIT' error (nothing written) for a key of the wrong
--   type, a bad counter or too many jobs.
-- Changes: jobs (HSETNX), ready (LPUSH) or delayed (ZADD), idem keys (SET NX PX),
--          stats enqueued / duplicates, wake.
-- @include _common.lua
helpers()  -- off the drain's hot path: every helper, made up front
local n = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local bad = check_count(n)
  or H.check({K_READY, K_DELAYED, K_JOBS, K_STATS, K_WAKE}, {'enqueued', 'duplicates'})
if not bad and (not window or window < 1) then bad = 'QUEUE_LIMIT idempotency window must be >= 1 ms' end
if bad then return redis.error_reply(bad) end
for i = 13, #KEYS do
  bad = H.check_string(KEYS[i])
  if bad then return redis.error_reply(bad) end
end
-- validated: no command below can fail
local now = now_ms()
local out, ready, delayed = {}, {}, {}
local added, dups = 0, 0
for i = 0, n - 1 do
  local b = 4 + i * 5
  local id, rec = ARGV[b], ARGV[b + 1]
  local delay, run_at, ik = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  local first = nil
  local replace = ik < 0
  if replace then ik = -ik end
  if ik > 0 then
    first = redis.call('GET', KEYS[12 + ik])
    if first and replace and redis.call('HEXISTS', K_JOBS, first) == 0 then first = nil end
    if not first then redis.call('SET', KEYS[12 + ik], id, 'PX', window) end
  end
  if first then
    out[#out + 1] = first
    dups = dups + 1
  elseif redis.call('HSETNX', K_JOBS, id, rec) == 0 then
    -- the same id sent twice (a client retry after a lost reply): natural dedup
    out[#out + 1] = id
    dups = dups + 1
  else
    out[#out + 1] = id
    added = added + 1
    local due = 0
    if run_at > 0 then due = run_at elseif delay > 0 then due = now + delay end
    if due > now then
      delayed[#delayed + 1] = due
      delayed[#delayed + 1] = id
    else
      ready[#ready + 1] = id
    end
  end
end
if #ready > 0 then chunked('LPUSH', K_READY, ready) end
chunked('ZADD', K_DELAYED, delayed)
if added > 0 then redis.call('HINCRBY', K_STATS, 'enqueued', added) end
if dups > 0 then redis.call('HINCRBY', K_STATS, 'duplicates', dups) end
H.wake(#ready + math.floor(#delayed / 2), tonumber(ARGV[3]))
return out
