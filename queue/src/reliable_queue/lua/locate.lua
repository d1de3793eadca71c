-- locate: where jobs really are (read only).
-- KEYS[1..19]: see _common.lua
-- ARGV[1..n] job ids (n <= MAX_BATCH)
-- Returns: {place 1, record exists 0/1, place 2, record exists 0/1, ...}: per id, the
--   first structure holding it, in the order active, ready (the ready list, or the
--   waiting zset of jobs with a flow value, ADR 0033), delayed, dead, done, or ''
--   when it is in none, and whether its record exists. The ready check is one LPOS per
--   id not active, from the oldest end (RANK -1: jobs leave from there, so a job that
--   has waited long, what the relay sweep asks about, is found after a short walk;
--   O(length of ready) at worst, no script-side loop over the list); the loop over the
--   ids is bounded by MAX_BATCH.
-- Errors: QUEUE_LIMIT more than MAX_BATCH ids (nothing read); QUEUE_CORRUPT a key it
--   reads (active, ready, delayed, dead, done, jobs) holds another type (checked first:
--   the caller gets a QueueDataError naming the key, not a script failure).
-- Changes: nothing.
-- @include _common.lua
helpers()  -- off the drain's hot path: every helper, made up front
local err = check_count(#ARGV)
  or H.check({K_ACTIVE, K_READY, K_DELAYED, K_DEAD, K_DONE, K_JOBS, K_WAITING})
if err then return redis.error_reply(err) end
local out = {}
for i = 1, #ARGV do
  local id = ARGV[i]
  local place = ''
  if redis.call('ZSCORE', K_ACTIVE, id) then
    place = 'active'
  elseif redis.call('ZSCORE', K_WAITING, id) then
    place = 'ready'
  elseif redis.call('LPOS', K_READY, id, 'RANK', -1) then
    place = 'ready'
  elseif redis.call('ZSCORE', K_DELAYED, id) then
    place = 'delayed'
  elseif redis.call('ZSCORE', K_DEAD, id) then
    place = 'dead'
  elseif redis.call('ZSCORE', K_DONE, id) then
    place = 'done'
  end
  out[#out + 1] = place
  out[#out + 1] = redis.call('HEXISTS', K_JOBS, id)
end
return out
