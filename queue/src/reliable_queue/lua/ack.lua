-- ack: record success of N leased jobs; stale lease tokens are refused.
-- KEYS[1..14]: see _common.lua (running and flow: the only flow keys it touches)
-- ARGV[1] retention ms (0 = delete the record now)
-- ARGV[2] n (at most MAX_BATCH), then n pairs: job id, lease token
-- Returns: {acked ids..., '|', refused ids...}  (a '|' separator; ids never contain '|').
--   A 'QUEUE_CORRUPT' / 'QUEUE_LIMIT' error (nothing written) for a key of the wrong
--   type or too many leases. Keys are checked when this call would touch them: jobs,
--   attempts and info only when it deletes records (retention 0, or a trim).
-- Changes: active, leases, done (or jobs/attempts/info/flow deleted), stats succeeded /
--          stale_refused; trims done records older than the retention window (bounded);
--          the queue clock's stats fields (see _common.lua); running (the acked jobs'
--          slots, ADR 0033; stats flow:slots goes when none is left) and wake (a token
--          when a slot is freed and none is waiting).
-- @include _common.lua
local retention, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local bad = check_count(n)
if bad then return redis.error_reply(bad) end
local ids = {}
for i = 1, n do ids[i] = ARGV[1 + 2 * i] end
-- reads first; each is also the type check of the key it reads (n <= MAX_BATCH: one
-- HMGET). The current tokens:
local cur = {}
if n > 0 then cur = redis.pcall('HMGET', K_LEASES, unpack(ids, 1, n)) end
if cur['err'] then return redis.error_reply(corrupt(K_LEASES, 'hash')) end
local now
now, bad = queue_now(SLOTS_FIELD)  -- also the type check of stats (a read)
if not now then return redis.error_reply(bad) end
local now_s = string.format('%d', now)  -- formatted once, not per job (see fetch.lua)
-- retention: finished records past the window, a bounded amount per call
local old = redis.pcall('ZRANGEBYSCORE', K_DONE, '-inf', string.format('%d', now - retention),
                        'LIMIT', '0', string.format('%d', math.min(2 * n + 100, TRIM_STEP)))
if old['err'] then return redis.error_reply(corrupt(K_DONE, 'zset')) end
local ok, refused, zdone = {}, {}, {}
local k = 0  -- ok's length (filled by index: a '#t' per append searches the table)
for i = 1, n do
  if cur[i] and cur[i] == ARGV[2 + 2 * i] then
    k = k + 1
    ok[k] = ids[i]
    zdone[2 * k - 1] = now_s
    zdone[2 * k] = ids[i]
  else
    refused[#refused + 1] = ids[i]
  end
end
-- then the keys this call writes without having read them; its first write, the bump
-- of one counter, is its own check of stats (under pcall, below)
if #ok > 0 then
  local _, err = read('zset', 'ZCARD', K_ACTIVE)
  if err then return redis.error_reply(err) end
end
local keys, counters = {}, {}
if #ok > 0 and #refused > 0 then counters[1] = 'stale_refused' end
if #old > 0 or (#ok > 0 and retention <= 0) then  -- records are deleted (forget)
  keys[#keys + 1] = K_JOBS
  keys[#keys + 1] = K_ATTEMPTS
  keys[#keys + 1] = K_INFO
end
-- a key cap's running slots (ADR 0033): looked at only while stats says there may be one
local slots = #ok > 0 and stats_extra and redis.call('EXISTS', K_RUNNING) == 1
local unflag = #ok > 0 and stats_extra and not slots  -- no slot left: the flag goes
if slots then
  keys[#keys + 1] = K_RUNNING
  keys[#keys + 1] = K_FLOW
  keys[#keys + 1] = K_WAKE
end
if #keys > 0 or #counters > 0 then
  helpers()
  bad = H.check(keys, counters)
  if bad then return redis.error_reply(bad) end
end
local counter, by, deferred = 'succeeded', #ok, false
if #ok > 0 or #refused > 0 then
  if #ok == 0 then counter, by = 'stale_refused', #refused end
  local r = redis.pcall('HINCRBY', K_STATS, counter, by)
  if type(r) == 'table' and r['err'] then
    if string.find(r['err'], 'WRONGTYPE', 1, true) then
      return redis.error_reply(corrupt(K_STATS, 'hash'))
    end
    if string.find(r['err'], 'not an integer', 1, true) then
      return redis.error_reply('QUEUE_CORRUPT stats counter ' .. counter .. ' is not an integer')
    end
    -- Refused, nothing written: over maxmemory Redis refuses a script's first write
    -- that may grow memory (OOM), and allows the writes after it. Settling frees memory,
    -- so it goes on: the counter is checked by a read and bumped after the ZREM, which
    -- is never refused. With nothing to settle (stale leases only) there is no such
    -- write: the refusal is the reply, nothing written.
    if #ok == 0 then return redis.error_reply(r['err']) end
    helpers()
    bad = H.check({}, {counter})
    if bad then return redis.error_reply(bad) end
    deferred = true
  end
end
-- validated: no command below can fail
if #ok > 0 then
  chunked('ZREM', K_ACTIVE, ok)
  if deferred then redis.call('HINCRBY', K_STATS, counter, by) end
  chunked('HDEL', K_LEASES, ok)
  if unflag then redis.call('HDEL', K_STATS, SLOTS_FIELD) end
  -- a slot came back: a worker whose fetch found every key capped may lease again
  if slots and H.unrun(ok) > 0 and redis.call('LLEN', K_WAKE) == 0 then
    redis.call('LPUSH', K_WAKE, '1')
  end
  if retention > 0 then
    chunked('ZADD', K_DONE, zdone)
  else
    H.forget(ok)
  end
  if #refused > 0 then redis.call('HINCRBY', K_STATS, 'stale_refused', #refused) end
end
if #old > 0 then
  chunked('ZREM', K_DONE, old)
  H.forget(old)
end
save_clock()
ok[#ok + 1] = '|'
for _, id in ipairs(refused) do ok[#ok + 1] = id end
return ok
