-- fetch: reap expired leases, promote due delayed jobs, then lease up to N ready jobs.
-- KEYS[1..19]: see _common.lua (18 paused, ADR 0031; 19 limit, ADR 0032; 13..17
-- running, flow, waiting, tags, keycap: priorities and fairness keys, ADR 0033)
-- ARGV[1] count            jobs to lease at most (0..MAX_BATCH)
-- ARGV[2] lease ms         lease length
-- ARGV[3] worker id        recorded in the lease token
-- ARGV[4] reap limit       expired leases reclaimed per call (0..MAX_BATCH; 0 = no
--                          reaping: the later calls of a split fetch, which must not
--                          reap the leases the first call just gave out, and which
--                          lease no suspect)
-- ARGV[5] default max attempts (for records that cannot be read)
-- ARGV[6] dlq max size     ARGV[7] dlq max age ms
-- ARGV[8] suspect mode     0: lease no suspect; 1: the caller runs nothing else in its
--                          process while it runs this fetch's jobs, so a suspect at the
--                          head is leased alone and marked so (ADR 0021)
-- Returns: {wait_ms, reaped, reap_more, held, id1, token1, attempt1, record1, id2, ...}
--   wait_ms: -1 when jobs were returned or nothing is pending; otherwise ms until
--   the next delayed job is due or the next lease expires. held: 1 (suspect waiting)
--   when nothing was leased because the head of the line is a suspect this call may not
--   lease (mode 0, or a later call of a split fetch); 2 (paused) when jobs wait but the
--   queue is paused; 3 (rate limited) when jobs wait but the queue's rate limit allows
--   none now (wait_ms is then at most the ms until its window reopens); 4 (capped) when
--   jobs wait but every one this call looked at belongs to a fairness key at its cap;
--   else 0. A 'QUEUE_CORRUPT' /
--   'QUEUE_LIMIT' error (nothing written) for a key of the wrong type, a bad count, a
--   bad mode, or a seq that is not an integer up to FENCE_MAX (2^53 - 501: exact in a
--   Lua number).
-- A suspect (a job lost with its worker or timed out, not run since) is leased only
-- alone in its process (ADR 0002, ADR 0021). A paused queue leases nothing; it still
-- reaps and promotes (ADR 0031). Jobs with a priority or a fairness key wait in the
-- waiting zset (ADR 0033): while it exists, the lease order is the lowest band first,
-- but one lease in SHARE_EVERY goes to a lower waiting band in turn; within a band, the
-- lowest start tag (the ready list being one lane of band 5); a key at its cap is passed
-- over. A fetch reads at most count + SCAN_EXTRA waiting jobs of each band it serves.
-- Changes: active/leases (reaped out, fetched in), ready, delayed, dead (worker lost;
--          an id that is not valid UTF-8 or too long: invalid_record), attempts (+1 per
--          delivery, -1 for a reaped job not charged), info (a reaped job's lease
--          expiry; `alone` on a suspect leased in mode 1), seq (max(seq + 1, queue ms *
--          1000) per lease), stats reaped / orphaned / dead / dlq_dropped, the queue
--          clock's stats fields (see _common.lua); waiting, tags and flow (jobs leased
--          from the waiting zset, reaped and promoted jobs that have a flow value),
--          running (slots of keys leased under a cap in, of reaped jobs and of jobs no
--          longer active out).
-- @include _common.lua
local count, lease_ms, worker = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local reap_limit, default_max = tonumber(ARGV[4]), tonumber(ARGV[5])
local dlq_size, dlq_age = tonumber(ARGV[6]), tonumber(ARGV[7])
local mode = tonumber(ARGV[8])
-- priorities and fairness (ADR 0033): of every SHARE_EVERY leases while lower bands
-- wait, one goes to the next lower waiting band in turn; a band's window is the count
-- plus SCAN_EXTRA waiting jobs; a key that looks capped has at most HEAL_MAX of its
-- running slots checked against `active` (a slot whose job is not active is dropped)
local SHARE_EVERY, SCAN_EXTRA, HEAL_MAX = 10, 100, 100
-- the rate limit (ADR 0032): {n, per, start, used} numbers, or nil when no limit is set,
-- or nil and an error for a limit key of another type or fields that are not integers
local function read_limit()
  local f, e = read('hash', 'HMGET', K_LIMIT, 'n', 'per', 'start', 'used')
  if e then return nil, e end
  if not f[1] and not f[2] then return nil end
  local v = {}
  for i = 1, 4 do
    local t = f[i] or '0'
    if #t > 16 or not string.match(t, '^%d+$') then
      return nil, 'QUEUE_CORRUPT key ' .. K_LIMIT .. ' field ' .. i .. ' is not an integer'
    end
    v[i] = tonumber(t)
  end
  if v[1] < 1 or v[2] < 1 then
    return nil, 'QUEUE_CORRUPT key ' .. K_LIMIT .. ' holds a limit below 1'
  end
  return v
end
local bad = check_count(count) or check_count(reap_limit)
if bad then return redis.error_reply(bad) end
if mode ~= 0 and mode ~= 1 then
  return redis.error_reply('QUEUE_LIMIT suspect mode ' .. tostring(ARGV[8]) .. ' is not 0 or 1')
end
-- reads first; each is also the type check of the key it reads (pcall: a wrong type
-- is refused as QUEUE_CORRUPT with nothing written)
local seq0 = redis.pcall('GET', K_SEQ)  -- also the type check of seq
if type(seq0) == 'table' then return redis.error_reply(corrupt(K_SEQ, 'string')) end
if seq0 and not (#seq0 <= 16 and string.match(seq0, '^%d+$')
                 and tonumber(seq0) <= FENCE_MAX) then
  return redis.error_reply('QUEUE_CORRUPT key ' .. K_SEQ .. ' is not an integer up to '
    .. string.format('%d', FENCE_MAX))
end
local now
now, bad = queue_now()  -- also the type check of stats (a read)
if not now then return redis.error_reply(bad) end
if now * 1000 > FENCE_MAX then  -- the queue clock past the year 2255
  return redis.error_reply('QUEUE_LIMIT the queue clock is beyond the fencing range')
end
-- Numbers passed to redis.call are formatted with '%.14g' on every pass (over a
-- thousand instructions for a 13-digit time): the drain's numbers are formatted once
-- each, as integers.
local now_s = string.format('%d', now)

-- 1. reap. A job lost with its worker is charged the attempt only when it ran alone in
-- its process: a suspect leased in mode 1, whose info says `alone`. Any other lost job
-- (in a batch, beside other lanes of its process, or lost for the first time) is not
-- charged (its delivery is taken back): it may never have started, or another job of
-- its process may have killed it. Either way it becomes a suspect, which is leased
-- only alone in its process, so a repeated crash narrows to the one job that causes
-- it. At max attempts a charged job is dead (worker_lost).
local expired = {}
if reap_limit > 0 then
  expired = redis.pcall('ZRANGEBYSCORE', K_ACTIVE, '-inf', now_s, 'LIMIT', '0',
                         string.format('%d', reap_limit))
  if expired['err'] then return redis.error_reply(corrupt(K_ACTIVE, 'zset')) end
end
local due = redis.pcall('ZRANGEBYSCORE', K_DELAYED, '-inf', now_s,
                        'LIMIT', '0', string.format('%d', math.max(count * 4, 1000)))
if due['err'] then return redis.error_reply(corrupt(K_DELAYED, 'zset')) end
-- Reaping or promoting writes before the lease step reads: then every key is checked
-- first. Otherwise (the drain's common case) the lease step's own reads are the checks
-- of the keys they read, and a key it writes unread is checked when it will write it.
local moved = #expired > 0 or #due > 0
if moved then
  helpers()
  local keys = {K_READY, K_JOBS, K_ATTEMPTS, K_LEASES, K_DEAD, K_INFO, K_STATS, K_PAUSED,
                K_WAITING, K_FLOW, K_TAGS, K_RUNNING}
  if reap_limit == 0 then keys[#keys + 1] = K_ACTIVE end
  bad = H.check(keys, {'reaped', 'orphaned', 'dead', 'dead:worker_lost',
                        'dead:invalid_record', 'dlq_dropped', 'rate_limited'})
  if bad then return redis.error_reply(bad) end
  local _
  _, bad = read_limit()  -- its fields too, before the first write
  if not bad then _, bad = H.read_cap() end
  if bad then return redis.error_reply(bad) end
end
local reaped = #expired
local dead_any = false
if reaped > 0 then
  local atts = H.chunked_read('HMGET', K_ATTEMPTS, expired)
  local recs = H.chunked_read('HMGET', K_JOBS, expired)
  local infos = H.chunked_read('HMGET', K_INFO, expired)
  local flows = H.chunked_read('HMGET', K_FLOW, expired)
  chunked('ZREM', K_ACTIVE, expired)
  chunked('HDEL', K_LEASES, expired)
  H.unrun(expired, flows)
  local back, bflows, aargs = {}, {}, {}
  for i, id in ipairs(expired) do
    local att = tonumber(atts[i]) or 0
    local alone = false  -- leased alone in its process (mode 1 wrote `alone` on its info)
    if infos[i] and H.is_suspect(infos[i]) and string.find(infos[i], '"alone"', 1, true) then
      local ok, data = pcall(cjson.decode, infos[i])
      alone = ok and type(data) == 'table' and data['alone'] == true
    end
    if alone and att >= math.max(H.max_attempts_in(recs[i], default_max), 1) then
      local info = cjson.encode({reason = 'worker_lost', attempts = att,
        error = 'lease expired without ack ' .. att .. ' time(s) while the job ran alone '
          .. 'in its process: the job is taken to cause the loss of its worker'})
      H.to_dead(id, 'worker_lost', info, now)
      dead_any = true
    else
      local note = 'lease expired without ack while the job ran alone in its process: '
        .. 'the attempt counts'
      if not alone then
        att = math.max(att - 1, 0)
        aargs[#aargs + 1] = id
        aargs[#aargs + 1] = att
        note = 'lease expired without ack: not counted as an attempt; the job runs alone '
          .. 'in its process next'
      end
      redis.call('HSET', K_INFO, id, cjson.encode({reason = 'lease_expired', attempts = att,
        error = note}))
      back[#back + 1] = id
      bflows[#back] = flows[i]
    end
  end
  if #aargs > 0 then chunked('HSET', K_ATTEMPTS, aargs) end
  -- back to the head of the line: the ready list's, or the front of their band
  local _, head = H.to_waiting(back, bflows, true)
  if #head > 0 then H.push_head(head) end
  redis.call('HINCRBY', K_STATS, 'reaped', reaped)
end

-- 2. promote due delayed jobs to the back of the line, in due order: due jobs are
-- served first-in-first-out by due time, behind the due jobs already waiting (a job
-- with a flow value: at the back of its key's lane in its band, or at the front of its
-- band when a throttle put it off, ADR 0033/0034). (`due` was read above, before any
-- write)
if #due > 0 then
  chunked('ZREM', K_DELAYED, due)
  if redis.call('EXISTS', K_FLOW) == 0 then
    chunked('LPUSH', K_READY, due)
  else
    local back, head = H.to_waiting(due, H.chunked_read('HMGET', K_FLOW, due), false)
    if #back > 0 then chunked('LPUSH', K_READY, back) end
    if #head > 0 then H.push_head(head) end
  end
end

-- 3. lease up to count ready jobs. The ids RPOP would pop are read first (LRANGE of
-- the tail, then their failure info, records and delivery counts); only what is
-- leased is then taken off the line (LTRIM), so a batch cut at a suspect leaves the
-- rest where it was.
local out = {-1, reaped, (reap_limit > 0 and reaped >= reap_limit) and 1 or 0, 0}
local ids, err = {}, nil
if count > 0 then
  local tail
  tail, err = read('list', 'LRANGE', K_READY, string.format('%d', -count), '-1')
  if err then return redis.error_reply(err) end
  local m = #tail
  for i = m, 1, -1 do ids[m + 1 - i] = tail[i] end  -- in RPOP order
end

-- flow control, decided here with the pop. One EXISTS of the keys whose presence
-- changes what a fetch leases is the whole cost of unused controls (an idle fetch pays
-- it too: jobs may wait in the waiting zset alone). A paused queue leases nothing, also
-- to a worker that was blocked on it before the pause (ADR 0031). A rate limit (ADR
-- 0032) is a fixed window on the queue clock: `used` of `n` jobs leased since `start`;
-- a window `per` ms old is over, and the next lease opens a new one at now. While the
-- waiting zset exists, the lease order is select_flow's (ADR 0033).
local limit, limit_wait, picks, start = nil, nil, nil, nil
if count > 0 and redis.call('EXISTS', K_PAUSED, K_LIMIT, K_WAITING) > 0 then
  local paused, waiting
  paused, err = read('hash', 'HLEN', K_PAUSED)
  if err then return redis.error_reply(err) end
  waiting, err = read('zset', 'ZCARD', K_WAITING)
  if err then return redis.error_reply(err) end
  if paused > 0 and (#ids > 0 or waiting > 0) then
    ids = {}
    out[4] = 2
  elseif #ids > 0 or waiting > 0 then
    limit, err = read_limit()
    if err then return redis.error_reply(err) end
    local allowed = count
    if limit then
      if now >= limit[3] + limit[2] then
        limit[3], limit[4] = now, 0
      end
      allowed = math.min(math.max(limit[1] - limit[4], 0), count)
    end
    if allowed == 0 then
      ids = {}
      out[4] = 3
      limit_wait = math.max(limit[3] + limit[2] - now, 1)
      local r = redis.pcall('HINCRBY', K_STATS, 'rate_limited', 1)
      if type(r) == 'table' and r['err'] then
        return redis.error_reply('QUEUE_CORRUPT key ' .. K_STATS
          .. ' field rate_limited is not an integer')
      end
    elseif waiting > 0 then
      -- the lease order while the waiting zset exists (ADR 0033), decided before any write
      -- (made here, not per call: a closure costs every call that makes it):
      -- up to `c` picks {id, from the ready list, band, tag, key, share count, share band}
      -- from the ready list's tail `line` (RPOP order: one lane of band 5) and the waiting
      -- zset. Returns the picks and the state they start from: {cap, V by band, the ready
      -- list's last tag, running slots found stale}; or nil and an error.
      local function select_flow(line, c)
        helpers()
        local BAND, DEFAULT_BAND = H.BAND, H.DEFAULT_BAND
        local cap, e = H.read_cap()
        if e then return nil, e end
        local tv
        local _
        tv, e = read('hash', 'HMGET', K_TAGS, 'n', 's', 'r', 'v0', 'v1', 'v2', 'v3', 'v4', 'v5',
                     'v6', 'v7', 'v8', 'v9')
        if not e then _, e = read('hash', 'HLEN', K_FLOW) end
        if not e and cap then _, e = read('zset', 'ZCARD', K_RUNNING) end
        if not e and cap then _, e = read('zset', 'ZCARD', K_ACTIVE) end
        if e then return nil, e end
        local V = {}
        for b = 0, 9 do V[b] = H.tag_of(tv[4 + b]) end
        local nshare, rlast = H.tag_of(tv[1]), H.tag_of(tv[3])
        local sband = tonumber(tv[2]) or -1
        -- the waiting bands, lowest first: one read per band found (at most ten)
        local present = {}
        local r = redis.call('ZRANGE', K_WAITING, 0, 0, 'WITHSCORES')
        for _ = 1, 10 do
          if #r == 0 then break end
          local b = math.min(math.max(math.floor(tonumber(r[2]) / BAND), 0), 9)
          present[b] = true
          if b == 9 then break end
          r = redis.call('ZRANGEBYSCORE', K_WAITING, string.format('%d', (b + 1) * BAND), '+inf',
                         'WITHSCORES', 'LIMIT', '0', '1')
        end
        if #line > 0 then present[DEFAULT_BAND] = true end
        local bands = {}
        for b = 0, 9 do if present[b] then bands[#bands + 1] = b end end
        -- a band's window: its first waiting jobs and their tags (and, under a cap, keys),
        -- read as they are needed (a job read costs a few thousand instructions), at most
        -- c of them, or c + SCAN_EXTRA under a cap (passed-over jobs of capped keys)
        local win, budget = {}, c + (cap and SCAN_EXTRA or 0)
        local function load(b, want)
          local w = win[b]
          if not w then
            w = {ids = {}, tags = {}, keys = {}, pos = 1, done = false}
            win[b] = w
          end
          local n = math.min(math.max(want, 1), budget - #w.ids)
          if w.done or n <= 0 then
            w.done = true
            return w
          end
          local lo = b == 0 and '-inf' or string.format('%d', b * BAND)
          local hi = b == 9 and '+inf' or '(' .. string.format('%d', (b + 1) * BAND)
          local z = redis.call('ZRANGEBYSCORE', K_WAITING, lo, hi, 'WITHSCORES', 'LIMIT',
                               string.format('%d', #w.ids), string.format('%d', n))
          local m, base = #w.ids, b * BAND
          for i = 1, #z, 2 do
            m = m + 1
            w.ids[m] = z[i]
            w.tags[m] = tonumber(z[i + 1]) - base
          end
          w.done = #z < 2 * n or m >= budget
          if cap and #z > 0 then  -- keys, for the cap (<= MAX_BATCH + SCAN_EXTRA at once)
            local first = m - #z / 2 + 1
            local f = redis.call('HMGET', K_FLOW, unpack(w.ids, first, m))
            for i = first, m do
              local _, k = H.parse_flow(f[i - first + 1])
              w.keys[i] = k or ''
            end
          end
          return w
        end
        -- a key's running slots, counted once per call (then by this call's picks); when it
        -- looks capped, slots whose job is not active are found stale (dropped at the writes)
        local running, stale = {}, {}
        local function count_of(k)
          local n = running[k]
          if n then return n end
          local lo, hi = '[' .. k .. '\0', '(' .. k .. '\1'
          n = redis.call('ZLEXCOUNT', K_RUNNING, lo, hi)
          if n >= cap then
            for _, m in ipairs(redis.call('ZRANGEBYLEX', K_RUNNING, lo, hi, 'LIMIT', '0',
                                          string.format('%d', HEAL_MAX))) do
              if not redis.call('ZSCORE', K_ACTIVE, string.sub(m, #k + 2)) then
                stale[#stale + 1] = m
                n = n - 1
              end
            end
          end
          running[k] = n
          return n
        end
        -- the next waiting job of band b that may be leased (its key below the cap), or
        -- nil; reads `want` more of the band when its window runs out
        local function zcand(b, want)
          local w = win[b] or load(b, want)
          while true do
            local i = w.pos
            while i <= #w.ids do
              local k = w.keys[i]
              if not cap or k == '' or count_of(k) < cap then break end
              i = i + 1  -- capped: passed over, it stays waiting
            end
            w.pos = i
            if i <= #w.ids then return i, w end
            if w.done then return nil end
            load(b, want)
          end
        end
        local rpos = 1
        local function has(b, want)
          return (b == DEFAULT_BAND and rpos <= #line) or zcand(b, want) ~= nil
        end
        local start = {cap = cap, V = {}, rlast = rlast, stale = stale}
        for b = 0, 9 do start.V[b] = V[b] end
        local picks = {}
        for left = c, 1, -1 do  -- left: picks this call may still make
          local top
          for j = 1, #bands do
            if has(bands[j], left) then
              top = j
              break
            end
          end
          if not top then break end
          local b = bands[top]
          if top < #bands then  -- lower bands wait: every SHARE_EVERY-th lease is theirs, in turn
            local lower
            if nshare >= SHARE_EVERY - 1 then
              local share = math.ceil(left / SHARE_EVERY)  -- what shares may take of it
              for j = top + 1, #bands do
                if bands[j] > sband and has(bands[j], share) then
                  lower = bands[j]
                  break
                end
              end
              for j = top + 1, #bands do
                if lower then break end
                if has(bands[j], share) then lower = bands[j] end
              end
            end
            if lower then
              b, sband, nshare = lower, lower, 0
            else
              nshare = nshare + 1
            end
          end
          -- within the band, the lowest start tag; the ready list's head is the lane of
          -- band 5 without a key, its tag made when it is served: max(V, its last) + 1
          local zi, w = zcand(b, left)
          local rt = nil
          if b == DEFAULT_BAND and rpos <= #line then rt = math.max(V[b], rlast) + 1 end
          if zi and (not rt or w.tags[zi] < rt) then
            local t, k = w.tags[zi], w.keys[zi]  -- k: nil without a cap (read at the writes)
            w.pos = zi + 1
            if t > V[b] and t < BAND then V[b] = t end
            if cap and k ~= '' then running[k] = running[k] + 1 end
            picks[#picks + 1] = {w.ids[zi], false, b, t, k, nshare, sband}
          else
            rlast = rt
            if rt > V[b] then V[b] = rt end
            picks[#picks + 1] = {line[rpos], true, b, rt, '', nshare, sband}
            rpos = rpos + 1
          end
        end
        return picks, start
      end
      picks, start = select_flow(ids, allowed)
      if not picks then return redis.error_reply(start) end
      ids = {}
      for i, p in ipairs(picks) do ids[i] = p[1] end
      if #ids == 0 then out[4] = 4 end
    else
      for j = #ids, allowed + 1, -1 do ids[j] = nil end
    end
  end
end
if #ids == 0 then
  if dead_any then H.trim_dead(now, dlq_size, dlq_age) end
  local nxt = redis.call('ZRANGE', K_DELAYED, 0, 0, 'WITHSCORES')
  local wait = -1
  if #nxt > 0 then wait = math.max(tonumber(nxt[2]) - now, 0) end
  local lease
  lease, err = read('zset', 'ZRANGE', K_ACTIVE, 0, 0, 'WITHSCORES')  -- unread when reap 0
  if err then return redis.error_reply(err) end
  if #lease > 0 then
    local w = math.max(tonumber(lease[2]) - now, 0) + 1
    if wait < 0 or w < wait then wait = w end
  end
  if limit_wait and (wait < 0 or limit_wait < wait) then wait = limit_wait end
  out[1] = wait
  save_clock()
  return out
end
-- a suspect (lost with a worker or timed out, not run since) is leased only alone in
-- its process: the batch ends before the first suspect that is not its first job, and
-- the rest stay at the head. A suspect at the head is leased as a batch of one in mode
-- 1 (its caller runs nothing else meanwhile), with `alone` added to its info, written
-- below (the reap charges only such a job). In mode 0, and in a later call of a split
-- fetch (reap limit 0: its fetch already holds jobs), it is not leased, and the empty
-- reply says suspect_waiting.
local infos, alone_info
infos, err = read('hash', 'HMGET', K_INFO, unpack(ids, 1, #ids))
if err then return redis.error_reply(err) end
for i = 1, #ids do
  if infos[i] then
    helpers()
    if H.is_suspect(infos[i]) then
      local cut = i
      if i == 1 and mode == 1 and reap_limit > 0 then
        cut = 2
        -- is_suspect decoded it: a table whose reason is a string. The text is made
        -- here, before the first write (an encode can fail, e.g. on a huge number)
        local _, data = pcall(cjson.decode, infos[1])
        data['alone'] = true
        local ok, text = pcall(cjson.encode, data)
        alone_info = ok and text or cjson.encode({reason = data['reason'], alone = true})
      elseif i == 1 then
        out[4] = 1
      end
      for j = #ids, cut, -1 do ids[j] = nil end
      break
    end
  end
end
local n = #ids  -- taken off the line: leased, dead-lettered (invalid id) or orphans
if n == 0 then
  if dead_any then H.trim_dead(now, dlq_size, dlq_age) end
  save_clock()
  return out
end
local recs
recs, err = read('hash', 'HMGET', K_JOBS, unpack(ids, 1, n))
if err then return redis.error_reply(err) end
-- ids that cannot be job ids (not UTF-8, too long) are isolated: never leased
local good, grecs, invalid, orphans = {}, {}, {}, 0
local g = 0
for i, id in ipairs(ids) do
  if not recs[i] then
    orphans = orphans + 1  -- an id with no record (a foreign producer, or a dropped record)
  elseif valid_id(id) then
    g = g + 1
    good[g] = id
    grecs[g] = recs[i]
  else
    invalid[#invalid + 1] = id
  end
end
local counts = {}
if #good > 0 then
  counts, err = read('hash', 'HMGET', K_ATTEMPTS, unpack(good, 1, #good))
  if err then return redis.error_reply(err) end
end
-- the keys written below without having been read: active when not read by the reap
-- (split calls), dead and stats only for an invalid id or an orphan, leases by its
-- HSET, the first write (under pcall: a wrong type fails it with nothing written)
if not moved and (reap_limit == 0 or #invalid > 0 or orphans > 0) then
  helpers()
  local keys, counters = {}, nil
  if reap_limit == 0 then keys[1] = K_ACTIVE end
  if #invalid > 0 or orphans > 0 then
    keys[#keys + 1] = K_DEAD
    keys[#keys + 1] = K_ATTEMPTS
    keys[#keys + 1] = K_STATS
    counters = {'orphaned', 'dead', 'dead:invalid_record', 'dlq_dropped'}
  end
  bad = H.check(keys, counters)
  if bad then return redis.error_reply(bad) end
end
-- what the picks of select_flow change (ADR 0033), read before the first write: the
-- ready list's tail taken (rtaken), the waiting members taken (zgone), the tags fields
-- written (tset) and deleted (a key's last tag, when its last waiting job leaves:
-- tdel), the running slots added (run) and the flow values of orphans (fdel)
local rtaken, zgone = n, nil
local tset, tdel, run, fdel = nil, nil, nil, nil
if picks then
  rtaken, zgone, tset, tdel, run, fdel = 0, {}, {}, {}, {}, {}
  local leased, V, rl = {}, {}, nil
  for _, id in ipairs(good) do leased[id] = true end
  for b = 0, 9 do V[b] = start.V[b] end
  if not start.cap then  -- the keys of the jobs taken from the zset (their last tags)
    local zi = {}
    for i = 1, n do
      if not picks[i][2] then zi[#zi + 1] = i end
    end
    if #zi > 0 then
      local ids2 = {}
      for j, i in ipairs(zi) do ids2[j] = picks[i][1] end
      local f = redis.call('HMGET', K_FLOW, unpack(ids2, 1, #ids2))  -- n <= MAX_BATCH
      for j, i in ipairs(zi) do
        local _, k = H.parse_flow(f[j])
        picks[i][5] = k or ''
      end
    end
  end
  local lastf = {}
  for i = 1, n do
    local p = picks[i]
    if p[2] then
      rtaken = rtaken + 1
      rl = p[4]
    else
      zgone[#zgone + 1] = p[1]
      lastf[#lastf + 1] = p[3] .. p[5]
      if start.cap and p[5] ~= '' and leased[p[1]] then
        run[#run + 1] = '0'
        run[#run + 1] = p[5] .. '\0' .. p[1]
      end
    end
    if p[4] > V[p[3]] and p[4] < H.BAND then V[p[3]] = p[4] end
    if not recs[i] then fdel[#fdel + 1] = p[1] end
  end
  for b = 0, 9 do
    if V[b] ~= start.V[b] then
      tset[#tset + 1] = 'v' .. b
      tset[#tset + 1] = string.format('%d', V[b])
    end
  end
  if rl then
    tset[#tset + 1] = 'r'
    tset[#tset + 1] = string.format('%d', rl)
  end
  tset[#tset + 1] = 'n'
  tset[#tset + 1] = string.format('%d', picks[n][6])
  if picks[n][7] >= 0 then
    tset[#tset + 1] = 's'
    tset[#tset + 1] = string.format('%d', picks[n][7])
  end
  if #lastf > 0 then
    local last = redis.call('HMGET', K_TAGS, unpack(lastf, 1, #lastf))  -- n <= MAX_BATCH
    local j = 0
    for i = 1, n do
      local p = picks[i]
      if not p[2] then
        j = j + 1
        if last[j] and tonumber(last[j]) == p[4] then tdel[#tdel + 1] = lastf[j] end
      end
    end
  end
end
-- delivery counts: one HMGET and one HSET per batch instead of an HINCRBY per job
-- fencing numbers: a hybrid logical clock, max(seq + 1, queue ms * 1000) per lease, so
-- after Redis lost writes (an AOF cut, a failover) new numbers are above every one
-- issued before the loss, as long as the queue issued at most 1,000 leases per ms
-- (ADR 0022); faster, the sequence runs ahead of the clock and stays monotonic
local seq = math.max(tonumber(seq0 or '0'), now * 1000 - 1)
local deadline = string.format('%d', now + lease_ms)
-- (the lists are filled by index: a '#t' per append is a search of the table's size;
-- the usual delivery counts are written from constants, not formatted per job)
local COUNTS = {'1', '2', '3', '4', '5', '6', '7', '8', '9', '10'}
local zargs, hargs, aargs, counted = {}, {}, {}, {}
local o = #out
for i, id in ipairs(good) do
  seq = seq + 1
  local token = string.format('%d:%s', seq, worker)
  local att = (counted[id] or tonumber(counts[i]) or 0) + 1  -- counted: an id twice in a batch
  counted[id] = att
  local k = 2 * i
  aargs[k - 1] = id
  aargs[k] = COUNTS[att] or string.format('%d', att)
  zargs[k - 1] = deadline
  zargs[k] = id
  hargs[k - 1] = id
  hargs[k] = token
  out[o + 1] = id
  out[o + 2] = token
  out[o + 3] = att
  out[o + 4] = grecs[i]
  o = o + 4
end
-- A new leases hash or active zset is made in its hashed encoding at once: created
-- by a small write, Redis keeps it compact (a listpack: every lookup, insert and
-- delete a scan of the whole key) up to hash-max-listpack-entries (512 by default) /
-- zset-max-listpack-entries (128), which made a drain's leasing and acking quadratic
-- in the jobs held. A first entry named PAD (longer than any job id, and than any
-- listpack value) converts the key as it is made; it is removed in this same call,
-- and a hashed key keeps its encoding until it is empty and deleted. Only a fetch of
-- PAD_MIN jobs or more does it: a small one (batch size 1 empties and makes the keys
-- at every job) is cheaper with a short listpack than with a pad (+15% at batch 1).
local PAD_MIN = 32
local pad_leases, pad_active = false, false
local PAD
if #good >= PAD_MIN then
  PAD = string.rep('~', 2 * MAX_ID_BYTES)  -- never a job id (see valid_id)
  pad_leases = redis.call('EXISTS', K_LEASES) == 0
  pad_active = redis.call('EXISTS', K_ACTIVE) == 0
  if pad_leases then
    table.insert(hargs, 1, PAD)
    table.insert(hargs, 2, '')
  end
  if pad_active then
    table.insert(zargs, 1, deadline)
    table.insert(zargs, 2, PAD)
  end
end
local trimmed = false
if #hargs > 0 then
  local r = redis.pcall('HSET', K_LEASES, unpack(hargs, 1, #hargs))  -- 2 * MAX_BATCH + 2
  if type(r) == 'table' and r['err'] then
    if string.find(r['err'], 'WRONGTYPE', 1, true) then
      return redis.error_reply(corrupt(K_LEASES, 'hash'))
    end
    -- Refused, nothing written: over maxmemory Redis refuses a script's first write
    -- that may grow memory (OOM), and allows the writes after it. Leasing frees memory
    -- (settled jobs leave), so it goes on: leases is checked by a read, then the LTRIM,
    -- which is never refused, writes first. Any other refusal (READONLY) refuses the
    -- LTRIM too, and the call fails with nothing written.
    local _
    _, err = read('hash', 'HLEN', K_LEASES)
    if err then return redis.error_reply(err) end
    if rtaken > 0 then redis.call('LTRIM', K_READY, '0', string.format('%d', -rtaken - 1)) end
    if zgone then chunked('ZREM', K_WAITING, zgone) end
    trimmed = true
    redis.call('HSET', K_LEASES, unpack(hargs, 1, #hargs))
  end
end
-- validated: no command below can fail
if not trimmed then
  if rtaken > 0 then redis.call('LTRIM', K_READY, '0', string.format('%d', -rtaken - 1)) end
  if zgone then chunked('ZREM', K_WAITING, zgone) end
end
if #hargs > 0 then
  redis.call('SET', K_SEQ, string.format('%d', seq))
  chunked('ZADD', K_ACTIVE, zargs)
  chunked('HSET', K_ATTEMPTS, aargs)
  if pad_leases then redis.call('HDEL', K_LEASES, PAD) end
  if pad_active then redis.call('ZREM', K_ACTIVE, PAD) end
end
for _, id in ipairs(invalid) do
  H.to_dead(id, 'invalid_record', cjson.encode({reason = 'invalid_record',
    error = 'the job id is not valid UTF-8 or longer than ' .. MAX_ID_BYTES .. ' bytes'}), now)
  dead_any = true
end
if dead_any then H.trim_dead(now, dlq_size, dlq_age) end
if orphans > 0 then redis.call('HINCRBY', K_STATS, 'orphaned', orphans) end
if limit and #good > 0 then
  redis.call('HSET', K_LIMIT, 'start', string.format('%d', limit[3]),
             'used', string.format('%d', limit[4] + #good))
end
if alone_info and #good == 1 then redis.call('HSET', K_INFO, good[1], alone_info) end
if picks then
  chunked('HSET', K_TAGS, tset)
  chunked('HDEL', K_TAGS, tdel)
  if #run > 0 then  -- slots taken: ack looks for them while stats says so
    redis.call('HSET', K_STATS, SLOTS_FIELD, '1')
    chunked('ZADD', K_RUNNING, run)
  end
  if #start.stale > 0 then
    chunked('ZREM', K_RUNNING, start.stale)
    if redis.call('EXISTS', K_RUNNING) == 0 then redis.call('HDEL', K_STATS, SLOTS_FIELD) end
  end
  chunked('HDEL', K_FLOW, fdel)
end
save_clock()
return out
