-- Shared fragment, included by the state-changing scripts (never run alone).
-- Key order (KEYS[1..12]) used by every script that includes this file:
--   1 ready    LIST  job ids waiting (LPUSH in, RPOP out)
--   2 delayed  ZSET  job id -> due ms
--   3 active   ZSET  job id -> lease deadline ms
--   4 jobs     HASH  job id -> JSON record {t,p,e,m,k}
--   5 attempts HASH  job id -> deliveries so far
--   6 leases   HASH  job id -> lease token
--   7 dead     ZSET  job id -> dead-lettered at ms
--   8 info     HASH  job id -> JSON of the last failure
--   9 done     ZSET  job id -> finished at ms
--  10 stats    HASH  counters, and the queue clock's clock:last_ms / clock:offset_ms
--  11 seq      STRING fencing-token sequence (hybrid: queue ms * 1000 + count, ADR 0022)
--  12 wake     LIST  wake-up tokens for idle workers
-- and KEYS[13..19], the flow-control keys (keys.py FLOW_KEYS), passed to every script
-- that moves a job (nil in extend and raise_fencing_floor; ack takes 13 and 14 only):
--  13 running  ZSET  "<fairness key> NUL <job id>" (score 0), leased under a key cap
--  14 flow     HASH  job id -> "[f]<priority>|<fairness key>" of jobs with a priority or
--                    a fairness key (f: front; ADR 0033)
--  15 waiting  ZSET  job id -> band * 2^48 + tag: such jobs waiting
--  16 tags     HASH  v<band> (last served tag), <band><key> (a key's last tag), r (the
--                    ready list's last tag), n / s (the share rule's count and band)
--  17 keycap   STRING K: at most K leased jobs per fairness key (ADR 0033)
--  18 paused   HASH  {since, by, reason} while paused (ADR 0031)
--  19 limit    HASH  {n, per, start, used} while rate-limited (ADR 0032)
if redis.replicate_commands then pcall(redis.replicate_commands) end

-- The script's globals as locals: in Redis's Lua a read of a global costs a few hundred
-- instructions (measured: 7 reads of KEYS[i] 1,550, of a local copy 740), a local's
-- next to nothing, and every redis.call, KEYS[i] and ARGV[i] below reads one.
local KEYS, ARGV, redis = KEYS, ARGV, redis
local K_READY, K_DELAYED, K_ACTIVE, K_JOBS = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local K_ATTEMPTS, K_LEASES, K_DEAD, K_INFO = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local K_DONE, K_STATS, K_SEQ, K_WAKE = KEYS[9], KEYS[10], KEYS[11], KEYS[12]
local K_RUNNING, K_FLOW, K_WAITING, K_TAGS, K_KEYCAP, K_PAUSED, K_LIMIT
if KEYS[13] then  -- (one read for the scripts given no flow key: a plain enqueue)
  K_RUNNING, K_FLOW, K_WAITING, K_TAGS = KEYS[13], KEYS[14], KEYS[15], KEYS[16]
  K_KEYCAP, K_PAUSED, K_LIMIT = KEYS[17], KEYS[18], KEYS[19]
end

-- Most job ids one call may carry (fetch count, ack/extend/release pairs, enqueue
-- jobs, purge/redrive/replay ids). Python splits larger requests (limits.py).
local MAX_BATCH = 500
-- Most entries one call trims (DLQ age/size, finished-record retention).
local TRIM_STEP = 500
-- Job ids longer than this are refused as invalid records (ids are short ASCII).
local MAX_ID_BYTES = 200

-- Each function of this fragment is a closure made anew at every script call, used or
-- not: about a thousand instructions apiece, once a third of the cost of a small
-- script. So only the helpers of the drain's hot path (fetch and ack) are made up
-- front; helpers() makes the others, and a script calls it before its first use of one
-- of them (the scripts off the hot path call it at their top).
-- They live in the table H (H.check, H.trim_dead, ...): one upvalue for the lot, where
-- a local per helper made every closure that names one capture it anew at each call.
local H  -- the helpers' table, made by helpers()

local function corrupt(k, want)
  return 'QUEUE_CORRUPT key ' .. k .. ' holds a ' .. redis.call('TYPE', k)['ok']
    .. ', expected a ' .. want
end

local function check_count(n)
  if not n or n < 0 or n > MAX_BATCH then
    return 'QUEUE_LIMIT batch of ' .. tostring(n) .. ' ids; one call takes at most ' .. MAX_BATCH
  end
  return nil
end

-- Largest fencing number a fetch may start from: every number stays below 2^53, where
-- a Lua number (a double) and '%d' are exact.
local FENCE_MAX = 9007199254740991 - MAX_BATCH

-- The queue clock (ADR 0022), what every deadline and due time is on: Redis TIME in ms
-- plus this queue's offset (stats clock:offset_ms), so worker clock skew cannot matter
-- and a step back of the Redis host's clock cannot hold a lease or a delay. When
-- TIME + offset is more than CLOCK_TOLERANCE_MS below the last queue time seen
-- (clock:last_ms), the offset grows so the clock goes on from there; while the offset
-- is above 0 it shrinks by 1 ms per CLOCK_SLEW ms, so the clock comes back to TIME at
-- 9/10 speed. A step forward is taken as it comes (leases end early; fencing holds).
local CLOCK_TOLERANCE_MS = 2000
local CLOCK_SAVE_MS = 1000  -- clock:last_ms is written at most about once a second
local CLOCK_SLEW = 10
local CLOCK_MAX_MS = 9007199254740  -- 2^53 / 1000: queue ms * 1000 stays exact
local clock_save  -- {queue ms, offset ms} for save_clock(), or nil
local stats_extra  -- the stats field queue_now(extra) read with the clock's fields
-- stats field that exists while the running set of a key cap may hold a slot (ADR
-- 0033): ack reads it with the clock, so a queue that never capped pays no extra call
local SLOTS_FIELD = 'flow:slots'

-- The queue time in ms, or nil and the refusal text when stats is not a hash (a read,
-- no write). A clock field that is not an integer up to CLOCK_MAX_MS counts as unset
-- and is written again.
local function queue_now(extra)
  local f
  if extra then  -- a third field of stats read with the clock's, into stats_extra
    f = redis.pcall('HMGET', K_STATS, 'clock:last_ms', 'clock:offset_ms', extra)
    stats_extra = not f['err'] and f[3] or nil
  else
    f = redis.pcall('HMGET', K_STATS, 'clock:last_ms', 'clock:offset_ms')
  end
  if f['err'] then return nil, corrupt(K_STATS, 'hash') end
  local t = redis.call('TIME')
  local q = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local last, off = f[1], f[2]
  last = last and #last <= 13 and string.match(last, '^%d+$') and tonumber(last)
  off = off and #off <= 13 and string.match(off, '^%d+$') and tonumber(off) or 0
  if off > CLOCK_MAX_MS then off = 0 end
  if not last or last > CLOCK_MAX_MS then
    clock_save = {q + off, off}
    return q + off
  end
  q = q + off
  local e = q - last
  if e < -CLOCK_TOLERANCE_MS then  -- the host's clock stepped back: go on from last
    clock_save = {last, off - e}
    return last
  end
  if e > 0 and off > 0 then  -- slew the offset back to 0
    local s = math.min(off, math.floor(e / CLOCK_SLEW))
    off, q, e = off - s, q - s, e - s
  end
  if e >= CLOCK_SAVE_MS then clock_save = {q, off} end
  return q
end

-- Write what queue_now() found due (at most about once a second, or a step back). Call
-- it after the script's checks and, where it can, after its other writes: refused (over
-- maxmemory, as a first write) it writes nothing and the script goes on.
local function save_clock()
  if clock_save then
    redis.pcall('HSET', K_STATS, 'clock:last_ms', string.format('%d', clock_save[1]),
                'clock:offset_ms', string.format('%d', clock_save[2]))
    clock_save = nil
  end
end

-- Call a variadic command over a list in chunks (Lua's unpack limit is ~8000).
local function chunked(cmd, key, list, from)
  local n = #list
  local i = from or 1
  while i <= n do
    local j = math.min(i + 999, n)
    redis.call(cmd, key, unpack(list, i, j))
    i = j + 1
  end
end

-- A read that is also the type check of the key it reads: its reply, or nil and the
-- refusal text when the key holds another type than `want`.
local function read(want, cmd, key, ...)
  local r = redis.pcall(cmd, key, ...)
  if type(r) == 'table' and r['err'] then return nil, corrupt(key, want) end
  return r
end

local function helpers()
  if H then return end
  -- the key names again, as this function's own locals: closures made here capture
  -- these, so the scripts' hot paths capture none
  local K_READY, K_DELAYED, K_ACTIVE, K_JOBS = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
  local K_ATTEMPTS, K_LEASES, K_DEAD, K_INFO = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
  local K_DONE, K_STATS, K_SEQ, K_WAKE = KEYS[9], KEYS[10], KEYS[11], KEYS[12]
  local K_RUNNING, K_FLOW, K_WAITING, K_TAGS = KEYS[13], KEYS[14], KEYS[15], KEYS[16]
  local K_KEYCAP = KEYS[17]
  -- Priorities and fairness (ADR 0033): a waiting job's score is band * BAND + tag, band
  -- its priority 0..9 (lower = sooner), tag its start tag in the band's fair queueing.
  -- DEFAULT_BAND without a fairness key is the plain `ready` list. (Constants of the
  -- helpers, H.BAND and H.DEFAULT_BAND: a name the helpers take from the script's chunk
  -- is an upvalue every call pays for when it makes them.)
  local BAND = 281474976710656  -- 2^48
  local DEFAULT_BAND = 5
  -- Every script validates before its first write: Redis keeps the writes a script made
  -- before an error, so a failure after a write would leave a job half moved.
  -- The type each queue key must hold (or nothing), and a read of that type with an
  -- integer reply: it fails on a key of another type, and is cheaper than TYPE (whose
  -- status reply Lua receives as a table).
  local SIZE_OF = {list = 'LLEN', zset = 'ZCARD', hash = 'HLEN', string = 'STRLEN'}
  local function key_type(k)
    if k == K_DELAYED or k == K_ACTIVE or k == K_DEAD or k == K_DONE then return 'zset' end
    if k == K_WAITING or k == K_RUNNING then return 'zset' end
    if k == K_READY or k == K_WAKE then return 'list' end
    if k == K_SEQ or k == K_KEYCAP then return 'string' end
    return 'hash'  -- jobs, attempts, leases, info, stats, paused, limit, flow, tags
  end

  -- nil when every key holds its type (or nothing) and every named stats counter is an
  -- integer (or unset); otherwise the error text to return, before any write.
  local function check(keys, counters)
    local with_counters = counters and #counters > 0
    for _, k in ipairs(keys) do
      if not (with_counters and k == K_STATS) then  -- the HMGET below reads the stats
        local want = key_type(k)
        local r = redis.pcall(SIZE_OF[want], k)
        if type(r) == 'table' and r['err'] then return corrupt(k, want) end
      end
    end
    if with_counters then
      local vals = redis.pcall('HMGET', K_STATS, unpack(counters))
      if vals['err'] then return corrupt(K_STATS, 'hash') end
      for i, v in ipairs(counters) do
        if vals[i] and not string.match(vals[i], '^%-?%d+$') then
          return 'QUEUE_CORRUPT stats counter ' .. v .. ' is not an integer'
        end
      end
    end
    return nil
  end

  -- The error text for a key that must be a STRING (or absent), else nil.
  local function check_string(k)
    local t = redis.call('TYPE', k)['ok']
    if t ~= 'none' and t ~= 'string' then
      return 'QUEUE_CORRUPT key ' .. k .. ' holds a ' .. t .. ', expected a string'
    end
    return nil
  end

  -- A read of a variadic command in chunks, the replies concatenated (HMGET).
  local function chunked_read(cmd, key, list)
    local n = #list
    if n <= 1000 then return n > 0 and redis.call(cmd, key, unpack(list, 1, n)) or {} end
    local out, i = {}, 1
    while i <= n do
      local j = math.min(i + 999, n)
      local part = redis.call(cmd, key, unpack(list, i, j))
      for x = 1, j - i + 1 do out[i + x - 1] = part[x] end
      i = j + 1
    end
    return out
  end

  -- Put ids back at the head of the line (RPOP end), the first of them to be popped first.
  local function push_head(ids)
    local rev = {}
    for i = #ids, 1, -1 do rev[#rev + 1] = ids[i] end
    chunked('RPUSH', K_READY, rev)
  end

  local function wake(count, cap)
    local n = math.min(count, cap)
    if n <= 0 then return end
    local t = {}
    for i = 1, n do t[i] = '1' end
    redis.call('LPUSH', K_WAKE, unpack(t))
    redis.call('LTRIM', K_WAKE, 0, cap - 1)
  end

  -- Forget every trace of the given job ids (record, attempts, failure info, flow value).
  local function forget(ids)
    if #ids == 0 then return end
    chunked('HDEL', K_JOBS, ids)
    chunked('HDEL', K_ATTEMPTS, ids)
    chunked('HDEL', K_INFO, ids)
    if K_FLOW then chunked('HDEL', K_FLOW, ids) end
  end

  -- A flow value "[f]<priority>|<fairness key>" (ADR 0033): band, key ('' for none) and
  -- the front flag; nil for none or a value of another shape (the job is then served as
  -- one of the default band without a key; the audit reports the value).
  local function parse_flow(v)
    if not v then return nil end
    local front = string.byte(v, 1) == 102  -- 'f'
    local at = front and 2 or 1
    local p = string.byte(v, at)
    if not p or p < 48 or p > 57 or string.byte(v, at + 1) ~= 124 then return nil end
    return p - 48, string.sub(v, at + 2), front
  end

  -- A tags field's number: an integer in 0..BAND-1, else 0 (a foreign value; the audit
  -- reports it).
  local function tag_of(v)
    local n = v and #v <= 16 and string.match(v, '^%d+$') and tonumber(v)
    if not n or n >= BAND then return 0 end
    return n
  end

  -- Put jobs back to wait; each is out of every structure. A job with a flow value
  -- (`flows[i]`, ADR 0033) joins the waiting zset in its band: at the front when `front`
  -- or its value's front flag says so (tag max(V - 1, 0), V the band's last served tag),
  -- else at the back of its fairness key's lane (start-time fair queueing: tag
  -- max(V, the key's last tag) + 1, which becomes the key's last tag). A front flag is
  -- cleared (a value left with the default band and no key is deleted: such a job goes
  -- back to `ready`). Returns the other ids, in order: those for the back of `ready` and
  -- those for its head (front). The caller has checked waiting, flow and tags.
  local function to_waiting(ids, flows, front)
    local back, head, jobs, need, seen = {}, {}, {}, {}, {}
    local fix = {}  -- flow values to rewrite (a front flag cleared): id, value, ...
    local gone = {}  -- flow values deleted
    for i, id in ipairs(ids) do
      local b, k, f = parse_flow(flows[i])
      if f then
        if b == DEFAULT_BAND and k == '' then
          gone[#gone + 1] = id
        else
          fix[#fix + 1] = id
          fix[#fix + 1] = b .. '|' .. k
        end
      end
      if not b or (b == DEFAULT_BAND and k == '') then
        if front or f then head[#head + 1] = id else back[#back + 1] = id end
      else
        f = front or f
        local fields = f and {'v' .. b} or {'v' .. b, b .. k}
        for _, field in ipairs(fields) do
          if not seen[field] then
            seen[field] = true
            need[#need + 1] = field
          end
        end
        jobs[#jobs + 1] = {id, b, k, f}
      end
    end
    if #jobs > 0 then
      local vals = chunked_read('HMGET', K_TAGS, need)
      local t, dirty = {}, {}
      for i, field in ipairs(need) do t[field] = tag_of(vals[i]) end
      local zargs = {}
      for _, j in ipairs(jobs) do
        local b, field = j[2], j[2] .. j[3]
        local tag
        if j[4] then
          tag = math.max(t['v' .. b] - 1, 0)
        else
          tag = math.max(t['v' .. b], t[field]) + 1
          t[field] = tag
          dirty[field] = true
        end
        zargs[#zargs + 1] = string.format('%d', b * BAND + tag)
        zargs[#zargs + 1] = j[1]
      end
      chunked('ZADD', K_WAITING, zargs)
      local hargs = {}
      for field in pairs(dirty) do
        hargs[#hargs + 1] = field
        hargs[#hargs + 1] = string.format('%d', t[field])
      end
      chunked('HSET', K_TAGS, hargs)
    end
    chunked('HSET', K_FLOW, fix)
    chunked('HDEL', K_FLOW, gone)
    return back, head
  end

  -- The per-key cap (ADR 0033): K, or nil when none is set, or nil and an error for a
  -- keycap key of another type or that is not an integer >= 1.
  local function read_cap()
    local v = redis.pcall('GET', K_KEYCAP)
    if type(v) == 'table' then return nil, corrupt(K_KEYCAP, 'string') end
    if not v then return nil end
    if #v > 9 or not string.match(v, '^%d+$') or tonumber(v) < 1 then
      return nil, 'QUEUE_CORRUPT key ' .. K_KEYCAP .. ' is not an integer >= 1'
    end
    return tonumber(v)
  end

  -- Take leased jobs' slots off the running set (ADR 0033): its membership is the
  -- per-key count of leased jobs, so every script that takes a job out of `active` calls
  -- this. `flows`: the ids' flow values (nil: read here). Returns the slots freed.
  local function unrun(ids, flows)
    if #ids == 0 or redis.call('EXISTS', K_RUNNING) == 0 then return 0 end
    flows = flows or chunked_read('HMGET', K_FLOW, ids)
    local freed = 0
    for i, id in ipairs(ids) do
      local b, k = parse_flow(flows[i])
      if b and k ~= '' then freed = freed + redis.call('ZREM', K_RUNNING, k .. '\0' .. id) end
    end
    if freed > 0 and redis.call('EXISTS', K_RUNNING) == 0 then
      redis.call('HDEL', K_STATS, SLOTS_FIELD)  -- no slot left: ack stops looking
    end
    return freed
  end

  -- Drop dead-letter entries beyond the age and size bounds, at most TRIM_STEP per call
  -- (maintenance calls again until nothing is left); dropping is counted.
  -- Returns how many were dropped.
  local function trim_dead(now, max_size, max_age_ms)
    local old = redis.call('ZRANGEBYSCORE', K_DEAD, '-inf', now - max_age_ms, 'LIMIT', 0, TRIM_STEP)
    local dropped = #old
    if dropped > 0 then
      chunked('ZREM', K_DEAD, old)
      forget(old)
    end
    local excess = math.min(redis.call('ZCARD', K_DEAD) - max_size, TRIM_STEP - dropped)
    if excess > 0 then
      local ids = redis.call('ZRANGE', K_DEAD, 0, excess - 1)
      chunked('ZREM', K_DEAD, ids)
      forget(ids)
      dropped = dropped + #ids
    end
    if dropped > 0 then redis.call('HINCRBY', K_STATS, 'dlq_dropped', dropped) end
    return dropped
  end

  -- Drop finished records older than the retention window, at most `limit` per call.
  local function trim_done(now, retention, limit)
    local old = redis.call('ZRANGEBYSCORE', K_DONE, '-inf', now - retention, 'LIMIT', 0, limit)
    if #old > 0 then
      chunked('ZREM', K_DONE, old)
      forget(old)
    end
    return #old
  end

  -- Move a job (already out of active/leases) to the dead-letter queue (no trim: the
  -- caller trims once, bounded).
  local function to_dead(id, reason, info_json, now)
    redis.call('ZADD', K_DEAD, now, id)
    redis.call('HSET', K_INFO, id, info_json)
    redis.call('HINCRBY', K_STATS, 'dead', 1)
    redis.call('HINCRBY', K_STATS, 'dead:' .. reason, 1)
  end

  -- Was this job lost with its worker, or did its last run time out (alone or in a
  -- batch call), and not run since (its last failure a lease expiry or a time-out)?
  -- Such a suspect is leased alone until it settles otherwise (ack, a plain nack,
  -- dead as anything but timed_out). `info` is the job's failure-info text or
  -- nil/false; bounded work per call.
  local function is_suspect(info)
    if not info then return false end
    if not string.find(info, 'lease_expired', 1, true)
      and not string.find(info, 'timed_out', 1, true) then return false end
    local ok, data = pcall(cjson.decode, info)
    if not ok or type(data) ~= 'table' then return false end
    return data['reason'] == 'lease_expired' or data['reason'] == 'timed_out'
  end

  -- Max attempts of a job from its record text; the default when it is unreadable.
  local function max_attempts_in(rec, default)
    if not rec then return default end
    local ok, data = pcall(cjson.decode, rec)
    if ok and type(data) == 'table' and tonumber(data['m']) then return tonumber(data['m']) end
    return default
  end

  -- Is s valid UTF-8 (what Python's strict decode accepts)? Used for job ids only,
  -- whose length is bounded by MAX_ID_BYTES before this is called.
  local function valid_utf8(s)
    if not string.find(s, '[\128-\255]') then return true end
    local i, n = 1, #s
    while i <= n do
      local c = string.byte(s, i)
      local len, lo, hi = 1, 0x80, 0xBF
      if c < 0x80 then len = 1
      elseif c >= 0xC2 and c <= 0xDF then len = 2
      elseif c == 0xE0 then len, lo = 3, 0xA0
      elseif c == 0xED then len, hi = 3, 0x9F
      elseif c >= 0xE1 and c <= 0xEF then len = 3
      elseif c == 0xF0 then len, lo = 4, 0x90
      elseif c >= 0xF1 and c <= 0xF3 then len = 4
      elseif c == 0xF4 then len, hi = 4, 0x8F
      else return false end
      if i + len - 1 > n then return false end
      for j = i + 1, i + len - 1 do
        local d = string.byte(s, j)
        local a, b = 0x80, 0xBF
        if j == i + 1 then a, b = lo, hi end
        if d < a or d > b then return false end
      end
      i = i + len
    end
    return true
  end
  -- one constructor: the table is sized once (assigning field by field regrows it)
  H = {check = check, check_string = check_string, chunked_read = chunked_read,
       push_head = push_head, wake = wake, forget = forget, trim_dead = trim_dead,
       trim_done = trim_done, to_dead = to_dead, is_suspect = is_suspect,
       max_attempts_in = max_attempts_in, valid_utf8 = valid_utf8, tag_of = tag_of,
       to_waiting = to_waiting, unrun = unrun, read_cap = read_cap, parse_flow = parse_flow,
       BAND = BAND, DEFAULT_BAND = DEFAULT_BAND}
end


local function valid_id(id)
  local n = #id
  if n == 0 or n > MAX_ID_BYTES then return false end
  -- ASCII (every id this library makes): the largest byte, found in C, is below 128
  if math.max(string.byte(id, 1, n)) < 128 then return true end
  helpers()
  return H.valid_utf8(id)
end
