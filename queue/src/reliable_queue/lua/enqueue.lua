-- enqueue: add N jobs atomically, each with an optional idempotency key.
-- KEYS[1..12]: see _common.lua; when a job has a flow value, KEYS[13..19] too (the
--   flow keys); then KEYS[b+i]: the i-th idempotency key STRING (b = 12, or 19).
-- ARGV[1] n jobs (at most MAX_BATCH)
-- ARGV[2] idempotency window, ms (>= 1)
-- ARGV[3] wake-token cap
-- ARGV[4] flow keys passed: 0 (no job has a flow value; each job takes 5 ARGV) or 7
--         (KEYS[13..19]; each job takes 6 ARGV)
-- then 5 (or 6) per job: id, record JSON, delay ms (0 = none), run_at ms (0 = none),
--                 index of its idempotency key among KEYS[b+1..] (0 = none; negative =
--                 the same index, and a key whose job record is gone is replaced),
--                 (with ARGV[4] > 0) its flow value "<priority 0-9>|<fairness key>" or
--                 '0' for none (ADR 0033)
-- Returns: a list of n job ids; for a duplicate, the id of the first job. A
--   'QUEUE_CORRUPT' / 'QUEUE_LIMIT' error (nothing written) for a key of the wrong
--   type, a bad counter or too many jobs. Keys are checked when this call would
--   write them: ready only for a job due now, delayed only for a job due later.
-- Changes: jobs (HSETNX), ready (LPUSH) or delayed (ZADD), idem keys (SET NX PX),
--          stats enqueued / duplicates, wake; the queue clock's stats fields (see
--          _common.lua) when a job has a delay or a run_at (the only calls that read it).
--          A job with a flow value: flow (HSET), and waiting and tags (at the back of
--          its key's lane in its band) instead of ready when it is due now.
-- @include _common.lua
-- Off the drain's hot path, yet a single enqueue is one script per job: it makes no
-- helpers (a dozen closures) and checks each key by a read it makes anyway, or by its
-- first write, or by one integer-reply read, all before that first write.
local n = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local flowing = ARGV[4] == '7'
local bad = check_count(n)
if not bad and (not window or window < 1) then
  bad = 'QUEUE_LIMIT idempotency window must be >= 1 ms'
end
if not bad and not (ARGV[4] == '0' or (flowing and KEYS[19])) then
  bad = 'QUEUE_LIMIT flow keys ' .. tostring(ARGV[4]) .. ' is not 0 or 7 keys passed'
end
if bad then return redis.error_reply(bad) end
local stride, ibase = 5, 12
if flowing then
  stride, ibase = 6, 19
  helpers()  -- the flow path is off the plain enqueue's: it may make them
  bad = H.check({K_WAITING, K_FLOW, K_TAGS})
  if bad then return redis.error_reply(bad) end
end
local window_s = string.format('%d', window)  -- formatted once (see fetch.lua)
-- One pass over the jobs, before any write: where each job goes if it is added (a
-- duplicate goes nowhere) and its idempotency key's GET, the read the loop needs and
-- the key's type check (pcall: a wrong type is QUEUE_CORRUPT with nothing written).
-- Python sends 0 as '0': comparing strings (interned) skips tonumber, which costs a
-- strtod, for the common job (no delay, no run_at, no key).
local now = nil  -- the queue time, read only when a job has a delay or a run_at
-- by job: due ms (delayed jobs only), index of its idempotency key in KEYS, replace a
-- stale key; by key name: its value (the GET, then the id this call set)
local dues, iks, replace, seen = {}, {}, {}, {}
local to_ready, to_delayed = false, false
local err
for i = 0, n - 1 do
  local b = 5 + i * stride
  local delay, run_at, ik = ARGV[b + 2], ARGV[b + 3], ARGV[b + 4]
  if delay == '0' and run_at == '0' then
    to_ready = true
  else
    if not now then
      now, err = queue_now()  -- also the type check of stats (a read)
      if not now then return redis.error_reply(err) end
    end
    local due = tonumber(run_at)
    if due <= 0 then
      due = tonumber(delay)
      due = due > 0 and now + due or 0
    end
    if due > now then
      dues[i] = due
      to_delayed = true
    else
      to_ready = true
    end
  end
  if ik ~= '0' then
    ik = tonumber(ik)
    iks[i] = ibase + (ik < 0 and -ik or ik)  -- its index in KEYS
    local k = KEYS[iks[i]]
    replace[i] = ik < 0
    if seen[k] == nil then
      local v
      v, err = read('string', 'GET', k)
      if err then return redis.error_reply(err) end
      seen[k] = v
    end
  end
end
-- the keys written unread: the line a job joins, the wake list (its length also sizes
-- the push: no trim after it), the two counters (an integer or unset)
local _
if to_ready then
  _, err = read('list', 'LLEN', K_READY)
  if err then return redis.error_reply(err) end
end
if to_delayed then
  _, err = read('zset', 'ZCARD', K_DELAYED)
  if err then return redis.error_reply(err) end
end
local woken
woken, err = read('list', 'LLEN', K_WAKE)
if err then return redis.error_reply(err) end
local counts
counts, err = read('hash', 'HMGET', K_STATS, 'enqueued', 'duplicates')
if err then return redis.error_reply(err) end
for i, c in ipairs({'enqueued', 'duplicates'}) do
  if counts[i] and not string.match(counts[i], '^%-?%d+$') then
    return redis.error_reply('QUEUE_CORRUPT stats counter ' .. c .. ' is not an integer')
  end
end
-- jobs: read by HEXISTS (a stale key, under pcall) or by the first HSETNX, the call's
-- first write (under pcall: a wrong type, or a refusal over maxmemory, fails it with
-- nothing written). Nothing is written before it: a duplicate writes nothing, and a
-- job's record is written before its idempotency key.
local jobs_ok = false
local out, ready, delayed = {}, {}, {}
-- flow jobs due now, their values, and the flow HSET's arguments (tables made only
-- when a job has a flow value: a table costs the plain enqueue a few hundred instructions)
local fwait, fvals, fargs = nil, nil, nil
if flowing then fwait, fvals, fargs = {}, {}, {} end
local added, dups = 0, 0
for i = 0, n - 1 do
  local b = 5 + i * stride
  local id, rec, ki = ARGV[b], ARGV[b + 1], iks[i]
  local first = nil
  if ki then
    first = seen[KEYS[ki]]
    if first and replace[i] then  -- replace a key whose job record is gone
      local r = redis.pcall('HEXISTS', K_JOBS, first)
      if type(r) == 'table' then return redis.error_reply(corrupt(K_JOBS, 'hash')) end
      jobs_ok = true
      if r == 0 then first = nil end
    end
  end
  local fresh = 0
  if not first then
    if jobs_ok then
      fresh = redis.call('HSETNX', K_JOBS, id, rec)
    else
      fresh = redis.pcall('HSETNX', K_JOBS, id, rec)
      if type(fresh) == 'table' then
        if string.find(fresh['err'], 'WRONGTYPE', 1, true) then
          return redis.error_reply(corrupt(K_JOBS, 'hash'))
        end
        return redis.error_reply(fresh['err'])  -- refused (OOM, READONLY): nothing written
      end
      jobs_ok = true
    end
    if ki then
      redis.call('SET', KEYS[ki], id, 'PX', window_s)
      seen[KEYS[ki]] = id
    end
  end
  if first then
    out[#out + 1] = first
    dups = dups + 1
  elseif fresh == 0 then
    -- the same id sent twice (a client retry after a lost reply): natural dedup
    out[#out + 1] = id
    dups = dups + 1
  else
    out[#out + 1] = id
    added = added + 1
    local fv = stride == 6 and ARGV[b + 5] ~= '0' and ARGV[b + 5] or nil
    if fv then
      fargs[#fargs + 1] = id
      fargs[#fargs + 1] = fv
    end
    if dues[i] then
      delayed[#delayed + 1] = string.format('%d', dues[i])
      delayed[#delayed + 1] = id
    elseif fv then
      fwait[#fwait + 1] = id
      fvals[#fvals + 1] = fv
    else
      ready[#ready + 1] = id
    end
  end
end
-- validated: no command below can fail
if #ready > 0 then chunked('LPUSH', K_READY, ready) end
if fargs and #fargs > 0 then
  chunked('HSET', K_FLOW, fargs)
  local back = H.to_waiting(fwait, fvals, false)  -- a value of another shape: plain
  if #back > 0 then chunked('LPUSH', K_READY, back) end
end
chunked('ZADD', K_DELAYED, delayed)
if added > 0 then redis.call('HINCRBY', K_STATS, 'enqueued', string.format('%d', added)) end
if dups > 0 then redis.call('HINCRBY', K_STATS, 'duplicates', string.format('%d', dups)) end
-- wake-up tokens: one per job added, the list kept at most cap long (its length was
-- read above, so no LTRIM)
local wake = math.min(#ready + (fwait and #fwait or 0) + #delayed / 2,
                      tonumber(ARGV[3]) - woken)
if wake > 0 then
  local t = {}
  for i = 1, wake do t[i] = '1' end
  redis.call('LPUSH', K_WAKE, unpack(t))
end
save_clock()  -- when a delay or run_at read the clock
return out
