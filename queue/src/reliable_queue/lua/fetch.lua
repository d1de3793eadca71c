-- fetch: reap expired leases, promote due delayed jobs, then lease up to N ready jobs.
-- KEYS[1..12]: see _common.lua
-- ARGV[1] count            jobs to lease at most (0..MAX_BATCH)
-- ARGV[2] lease ms         lease length
-- ARGV[3] worker id        recorded in the lease token
-- ARGV[4] reap limit       expired leases reclaimed per call (0..MAX_BATCH; 0 = no
--                          reaping: the later calls of a split fetch, which must not
--                          reap the leases the first call just gave out, and which
--                          lease no suspect)
-- ARGV[5] default max attempts (for records that cannot be read)
-- ARGV[6] dlq max size     ARGV[7] dlq max age ms
-- Returns: {wait_ms, reaped, reap_more, id1, token1, attempt1, record1, id2, ...}
--   wait_ms: -1 when jobs were returned or nothing is pending; otherwise ms until
--   the next delayed job is due or the next lease expires. A 'QUEUE_CORRUPT' /
--   'QUEUE_LIMIT' error (nothing written) for a key of the wrong type or a bad count.
-- A suspect (a job lost with its worker and not run since) is leased alone (ADR 0002).
-- Changes: active/leases (reaped out, fetched in), ready, delayed, dead (worker lost;
--          an id that is not valid UTF-8 or too long: invalid_record), attempts (+1 per
--          delivery, -1 for a reaped job not charged), seq,
--          stats reaped / orphaned / dead / dlq_dropped.
-- @include _common.lua
local count, lease_ms, worker = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local reap_limit, default_max = tonumber(ARGV[4]), tonumber(ARGV[5])
local dlq_size, dlq_age = tonumber(ARGV[6]), tonumber(ARGV[7])
local bad = check_count(count) or check_count(reap_limit)
if bad then return redis.error_reply(bad) end
-- reads first; each is also the type check of the key it reads (pcall: a wrong type
-- is refused as QUEUE_CORRUPT with nothing written)
local seq0 = redis.pcall('GET', K_SEQ)  -- also the type check of seq
if type(seq0) == 'table' then return redis.error_reply(corrupt(K_SEQ, 'string')) end
if seq0 and not string.match(seq0, '^%d+$') then
  return redis.error_reply('QUEUE_CORRUPT key ' .. K_SEQ .. ' is not an integer')
end
local now = now_ms()

-- 1. reap. A job lost with its worker is charged the attempt only when it ran alone
-- (it was already a suspect: its last failure a lease expiry). A job lost in a batch,
-- or lost for the first time, is not charged (its delivery is taken back): it may
-- never have started, and the culprit is not known. Either way it becomes a suspect,
-- which fetch leases alone, so a repeated crash narrows to the one job that causes it.
-- At max attempts a charged job is dead (worker_lost).
local expired = {}
if reap_limit > 0 then
  expired = redis.pcall('ZRANGEBYSCORE', K_ACTIVE, '-inf', now, 'LIMIT', 0, reap_limit)
  if expired['err'] then return redis.error_reply(corrupt(K_ACTIVE, 'zset')) end
end
local due = redis.pcall('ZRANGEBYSCORE', K_DELAYED, '-inf', now,
                        'LIMIT', 0, math.max(count * 4, 1000))
if due['err'] then return redis.error_reply(corrupt(K_DELAYED, 'zset')) end
-- then the keys written without having been read: ready too when reaping or promoting
-- writes before its RPOP (otherwise that RPOP is the first write, and its own check)
local keys = {K_JOBS, K_ATTEMPTS, K_LEASES, K_DEAD, K_INFO, K_STATS}
if reap_limit == 0 then keys[#keys + 1] = K_ACTIVE end
if #expired > 0 or #due > 0 then keys[#keys + 1] = K_READY end
bad = check(keys, {'reaped', 'orphaned', 'dead', 'dead:worker_lost', 'dead:invalid_record',
                   'dlq_dropped'})
if bad then return redis.error_reply(bad) end
-- validated: no command below can fail, but for that RPOP
local reaped = #expired
local dead_any = false
if reaped > 0 then
  local atts = chunked_read('HMGET', K_ATTEMPTS, expired)
  local recs = chunked_read('HMGET', K_JOBS, expired)
  local infos = chunked_read('HMGET', K_INFO, expired)
  chunked('ZREM', K_ACTIVE, expired)
  chunked('HDEL', K_LEASES, expired)
  local back, aargs = {}, {}
  for i, id in ipairs(expired) do
    local att = tonumber(atts[i]) or 0
    local alone = is_suspect(infos[i])
    if alone and att >= math.max(max_attempts_in(recs[i], default_max), 1) then
      local info = cjson.encode({reason = 'worker_lost', attempts = att,
        error = 'lease expired without ack ' .. att .. ' time(s) while the job ran alone: '
          .. 'the job is taken to cause the loss of its worker'})
      to_dead(id, 'worker_lost', info, now)
      dead_any = true
    else
      local note = 'lease expired without ack while the job ran alone: the attempt counts'
      if not alone then
        att = math.max(att - 1, 0)
        aargs[#aargs + 1] = id
        aargs[#aargs + 1] = att
        note = 'lease expired without ack: not counted as an attempt; the job runs alone next'
      end
      redis.call('HSET', K_INFO, id, cjson.encode({reason = 'lease_expired', attempts = att,
        error = note}))
      back[#back + 1] = id
    end
  end
  if #aargs > 0 then chunked('HSET', K_ATTEMPTS, aargs) end
  if #back > 0 then push_head(back) end
  redis.call('HINCRBY', K_STATS, 'reaped', reaped)
end

-- 2. promote due delayed jobs to the back of the line, in due order: due jobs are
-- served first-in-first-out by due time, behind the due jobs already waiting.
-- (`due` was read above, before any write)
if #due > 0 then
  chunked('ZREM', K_DELAYED, due)
  chunked('LPUSH', K_READY, due)
end

-- 3. lease up to count ready jobs (count 0: reap and promote only; RPOP with a
-- count of 0 replies an empty array, not nil).
local out = {-1, reaped, (reap_limit > 0 and reaped >= reap_limit) and 1 or 0}
local ids = false
if count > 0 then
  ids = redis.pcall('RPOP', K_READY, count)
  if ids and ids['err'] then return redis.error_reply(corrupt(K_READY, 'list')) end
end
if not ids then
  if dead_any then trim_dead(now, dlq_size, dlq_age) end
  local nxt = redis.call('ZRANGE', K_DELAYED, 0, 0, 'WITHSCORES')
  local wait = -1
  if #nxt > 0 then wait = math.max(tonumber(nxt[2]) - now, 0) end
  local lease = redis.call('ZRANGE', K_ACTIVE, 0, 0, 'WITHSCORES')
  if #lease > 0 then
    local w = math.max(tonumber(lease[2]) - now, 0) + 1
    if wait < 0 or w < wait then wait = w end
  end
  out[1] = wait
  return out
end
-- a suspect (lost with a worker, not run since) is leased alone: the batch ends
-- before the first suspect that is not its first job; the rest go back to the head.
-- A later call of a split fetch (reap limit 0) never leases a suspect: its fetch
-- already holds jobs (the caller sends it only after a full first call).
local infos = chunked_read('HMGET', K_INFO, ids)
for i = 1, #ids do
  if infos[i] and is_suspect(infos[i]) then
    local cut = (i == 1 and reap_limit > 0) and 2 or i
    if cut <= #ids then
      local rest = {}
      for j = cut, #ids do rest[#rest + 1] = ids[j] end
      for j = #ids, cut, -1 do ids[j] = nil end
      push_head(rest)
    end
    break
  end
end
-- ids that cannot be job ids (not UTF-8, too long) are isolated: never leased
local good, invalid = {}, {}
for _, id in ipairs(ids) do
  if valid_id(id) then good[#good + 1] = id else invalid[#invalid + 1] = id end
end
local recs = chunked_read('HMGET', K_JOBS, good)
-- delivery counts: one HMGET and one HSET per batch instead of an HINCRBY per job
local counts = chunked_read('HMGET', K_ATTEMPTS, good)
local seq = tonumber(seq0 or '0')
local deadline = now + lease_ms
local zargs, hargs, aargs, orphans, counted = {}, {}, {}, 0, {}
for i, id in ipairs(good) do
  local rec = recs[i]
  if rec then
    seq = seq + 1
    local token = seq .. ':' .. worker
    local att = (counted[id] or tonumber(counts[i]) or 0) + 1  -- counted: an id twice in a batch
    counted[id] = att
    aargs[#aargs + 1] = id
    aargs[#aargs + 1] = att
    zargs[#zargs + 1] = deadline
    zargs[#zargs + 1] = id
    hargs[#hargs + 1] = id
    hargs[#hargs + 1] = token
    out[#out + 1] = id
    out[#out + 1] = token
    out[#out + 1] = att
    out[#out + 1] = rec
  else
    -- an id with no record (written by a foreign producer, or its record dropped)
    orphans = orphans + 1
  end
end
if #zargs > 0 then
  redis.call('SET', K_SEQ, seq)
  chunked('ZADD', K_ACTIVE, zargs)
  chunked('HSET', K_LEASES, hargs)
  chunked('HSET', K_ATTEMPTS, aargs)
end
if #invalid > 0 then
  local irecs = chunked_read('HMGET', K_JOBS, invalid)
  for i, id in ipairs(invalid) do
    if irecs[i] then
      to_dead(id, 'invalid_record', cjson.encode({reason = 'invalid_record',
        error = 'the job id is not valid UTF-8 or longer than ' .. MAX_ID_BYTES .. ' bytes'}), now)
      dead_any = true
    else
      orphans = orphans + 1
    end
  end
end
if dead_any then trim_dead(now, dlq_size, dlq_age) end
if orphans > 0 then redis.call('HINCRBY', K_STATS, 'orphaned', orphans) end
return out
