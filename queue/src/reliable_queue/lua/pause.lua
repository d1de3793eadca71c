-- pause: pause or resume a queue (ADR 0031). While the paused hash exists, fetch leases
-- nothing (it still reaps and promotes); the decision is fetch's, atomically with its pop.
-- KEYS[1..19]: see _common.lua; paused (18) HASH {since, by, reason} while paused;
-- limit (19) HASH {n, per, start, used} while a rate limit is set (ADR 0032);
-- keycap (17) STRING K while a per-key cap is set (ADR 0033)
-- Also the rate limit's setter: ARGV[1] 'limit' (ARGV[2] n >= 1 jobs, ARGV[3] per ms >= 1;
--   a new window opens at the next fetch, so a changed limit applies from it; returns
--   {1 when a limit was set before else 0, 0}) or 'unlimit' (removes a limit key of any
--   type; returns {1 when there was one else 0, 0}).
-- Also the per-key cap's setter: ARGV[1] 'cap' (ARGV[2] K >= 1: at most K leased jobs
--   per fairness key from the next fetch; returns {1 when a cap was set before else 0,
--   0}) or 'uncap' (removes a keycap key of any type; returns {1 when there was one, 0}).
--   Leased jobs keep their slots until they settle.
-- ARGV[1] action   'pause' or 'resume'
-- ARGV[2] by       who pauses (text, already bounded by the caller; pause only)
-- ARGV[3] reason   why (text, already bounded by the caller; pause only)
-- ARGV[4] wake-token cap (resume: idle workers are woken for the jobs waiting)
-- Returns: pause: {1 when the queue was already paused else 0, since ms, fence}, fence
--   the last fencing number issued before this call (text; '0' when none): every lease
--   made after it has a larger number; a second pause keeps the first `since` and
--   replaces `by` and `reason`. resume: {1 when the queue was
--   paused (a paused key of any type is removed: resume is also the repair of a foreign
--   value there) else 0, 0}. A 'QUEUE_CORRUPT' / 'QUEUE_LIMIT' error (nothing written)
--   for a key of the wrong type (pause: paused; resume: ready, wake) or a bad action.
-- Changes: paused; wake (resume); the queue clock's stats fields (see _common.lua).
-- @include _common.lua
helpers()  -- off the drain's hot path: every helper, made up front
local action = ARGV[1]
if action == 'pause' then
  local since = redis.pcall('HGET', K_PAUSED, 'since')  -- also the type check of paused
  if type(since) == 'table' then return redis.error_reply(corrupt(K_PAUSED, 'hash')) end
  local now, bad = queue_now()  -- also the type check of stats
  if not now then return redis.error_reply(bad) end
  -- the last fencing number issued: a lease made after this pause has a larger one
  -- (fetch stores the number of its last lease in seq, ADR 0022)
  local fence = redis.pcall('GET', K_SEQ)  -- also the type check of seq
  if type(fence) == 'table' then return redis.error_reply(corrupt(K_SEQ, 'string')) end
  if not (fence and #fence <= 16 and string.match(fence, '^%d+$')) then fence = '0' end
  local was = 0
  if since and string.match(since, '^%d+$') and #since <= 16 then
    was = 1
  else
    since = string.format('%d', now)
  end
  redis.call('HSET', K_PAUSED, 'since', since, 'by', ARGV[2], 'reason', ARGV[3])
  save_clock()
  return {was, tonumber(since), fence}
elseif action == 'resume' then
  local cap = tonumber(ARGV[4])
  if not cap or cap < 1 then
    return redis.error_reply('QUEUE_LIMIT wake-token cap ' .. tostring(ARGV[4]) .. ' is not >= 1')
  end
  local waiting, err = read('list', 'LLEN', K_READY)
  if err then return redis.error_reply(err) end
  local flowing
  flowing, err = read('zset', 'ZCARD', K_WAITING)
  if err then return redis.error_reply(err) end
  waiting = waiting + flowing
  local bad = H.check({K_WAKE})
  if bad then return redis.error_reply(bad) end
  local was = redis.call('DEL', K_PAUSED)
  if was > 0 then H.wake(waiting, cap) end
  return {was, 0}
elseif action == 'limit' then
  local n, per = ARGV[2], ARGV[3]
  for _, v in ipairs({n, per}) do
    if #v > 12 or not string.match(v, '^%d+$') or tonumber(v) < 1 then
      return redis.error_reply('QUEUE_LIMIT a rate limit ' .. v .. ' is not an integer >= 1')
    end
  end
  local ok = redis.pcall('HLEN', K_LIMIT)  -- the type check of limit
  if type(ok) == 'table' then return redis.error_reply(corrupt(K_LIMIT, 'hash')) end
  redis.call('DEL', K_LIMIT)
  redis.call('HSET', K_LIMIT, 'n', n, 'per', per, 'start', '0', 'used', '0')
  return {ok > 0 and 1 or 0, 0}
elseif action == 'unlimit' then
  return {redis.call('DEL', K_LIMIT), 0}
elseif action == 'cap' then
  local k = ARGV[2]
  if #k > 9 or not string.match(k, '^%d+$') or tonumber(k) < 1 then
    return redis.error_reply('QUEUE_LIMIT a key cap ' .. k .. ' is not an integer >= 1')
  end
  local was, e = read('string', 'GET', K_KEYCAP)  -- the type check of keycap
  if e then return redis.error_reply(e) end
  redis.call('SET', K_KEYCAP, k)
  return {was and 1 or 0, 0}
elseif action == 'uncap' then
  return {redis.call('DEL', K_KEYCAP), 0}
end
return redis.error_reply('QUEUE_LIMIT unknown pause action ' .. tostring(action))
