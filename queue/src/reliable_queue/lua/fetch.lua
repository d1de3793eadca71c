-- fetch: reap expired leases, promote due delayed jobs, then lease up to N ready jobs.
-- KEYS[1..12]: see _common.lua
-- ARGV[1] count            jobs to lease at most
-- ARGV[2] lease ms         lease length
-- ARGV[3] worker id        recorded in the lease token
-- ARGV[4] reap limit       expired leases reclaimed per call
-- ARGV[5] default max attempts (for records that cannot be read)
-- ARGV[6] dlq max size     ARGV[7] dlq max age ms
-- Returns: {wait_ms, reaped, reap_more, id1, token1, attempt1, record1, id2, ...}
--   wait_ms: -1 when jobs were returned or nothing is pending; otherwise ms until
--   the next delayed job is due or the next lease expires.
-- Changes: active/leases (reaped out, fetched in), ready, delayed, dead (worker lost),
--          attempts (+1 per delivery), seq, stats reaped / orphaned.
-- @include _common.lua
local now = now_ms()
local count, lease_ms, worker = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local reap_limit, default_max = tonumber(ARGV[4]), tonumber(ARGV[5])
local dlq_size, dlq_age = tonumber(ARGV[6]), tonumber(ARGV[7])

-- 1. reap: a lost worker counts as an attempt; at max attempts the job is dead.
local expired = redis.call('ZRANGEBYSCORE', K_ACTIVE, '-inf', now, 'LIMIT', 0, reap_limit)
local reaped = #expired
if reaped > 0 then
  chunked('ZREM', K_ACTIVE, expired)
  chunked('HDEL', K_LEASES, expired)
  local back = {}
  for _, id in ipairs(expired) do
    local att = tonumber(redis.call('HGET', K_ATTEMPTS, id) or '0')
    if att >= math.max(max_attempts_of(id, default_max), 1) then
      local info = cjson.encode({reason = 'worker_lost', attempts = att,
        error = 'lease expired without ack ' .. att .. ' time(s): the worker was lost'})
      to_dead(id, 'worker_lost', info, now, dlq_size, dlq_age)
    else
      redis.call('HSET', K_INFO, id, cjson.encode({reason = 'lease_expired', attempts = att,
        error = 'lease expired without ack: the job is handed out again'}))
      back[#back + 1] = id
    end
  end
  if #back > 0 then push_head(back) end
  redis.call('HINCRBY', K_STATS, 'reaped', reaped)
end

-- 2. promote due delayed jobs to the head of the line (they are overdue), in due order.
local due = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', now, 'LIMIT', 0, math.max(count * 4, 1000))
if #due > 0 then
  chunked('ZREM', K_DELAYED, due)
  push_head(due)
end

-- 3. lease up to count ready jobs (count 0: reap and promote only; RPOP with a
-- count of 0 replies an empty array, not nil).
local out = {-1, reaped, reaped >= reap_limit and 1 or 0}
local ids = false
if count > 0 then ids = redis.call('RPOP', K_READY, count) end
if not ids then
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
local recs = redis.call('HMGET', K_JOBS, unpack(ids))
-- delivery counts: one HMGET and one HSET per batch instead of an HINCRBY per job
local counts = redis.call('HMGET', K_ATTEMPTS, unpack(ids))
local seq = redis.call('INCRBY', K_SEQ, #ids) - #ids
local deadline = now + lease_ms
local zargs, hargs, aargs, orphans, counted = {}, {}, {}, 0, {}
for i, id in ipairs(ids) do
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
  redis.call('ZADD', K_ACTIVE, unpack(zargs))
  redis.call('HSET', K_LEASES, unpack(hargs))
  redis.call('HSET', K_ATTEMPTS, unpack(aargs))
end
if orphans > 0 then redis.call('HINCRBY', K_STATS, 'orphaned', orphans) end
return out
