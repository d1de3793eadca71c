-- presence: a worker process publishes its state (ADR 0043). Not a job's state change:
-- these keys hold no job, and no script reads a job's place from them.
-- KEYS[1] seen    ZSET worker id -> ms (Redis TIME) of its last publish
-- KEYS[2] states  HASH worker id -> its last state, JSON (reliable_queue.presence)
-- ARGV[1] worker id        (at most MAX_ID_BYTES bytes)
-- ARGV[2] state            JSON text (at most MAX_WORKER_STATE_BYTES bytes)
-- ARGV[3] retention ms     a worker not heard of for longer is forgotten (>= 1)
-- ARGV[4] cap              most workers kept; beyond it the least recently heard of go
-- Returns: the publish time, ms (Redis TIME). A 'QUEUE_CORRUPT' error (nothing written)
--   when seen is not a zset or states not a hash; 'QUEUE_LIMIT' for an argument out of
--   bounds.
-- Changes: seen and states: this worker's entry; at most PRESENCE_TRIM entries forgotten per
--   call (older than the retention, then the oldest beyond the cap), from both keys.
if redis.replicate_commands then pcall(redis.replicate_commands) end

local K_SEEN, K_STATES = KEYS[1], KEYS[2]
local MAX_ID_BYTES = 200
local MAX_WORKER_STATE_BYTES = 65536
local PRESENCE_TRIM = 100

local id, state = ARGV[1], ARGV[2]
local retention, cap = tonumber(ARGV[3]), tonumber(ARGV[4])
if #id == 0 or #id > MAX_ID_BYTES then
  return redis.error_reply('QUEUE_LIMIT a worker id is 1..' .. MAX_ID_BYTES .. ' bytes')
end
if #state > MAX_WORKER_STATE_BYTES then
  return redis.error_reply('QUEUE_LIMIT a worker state is at most ' .. MAX_WORKER_STATE_BYTES .. ' bytes')
end
if not retention or retention < 1 or not cap or cap < 1 then
  return redis.error_reply('QUEUE_LIMIT retention and cap must be >= 1')
end
for _, pair in ipairs({{K_SEEN, 'zset'}, {K_STATES, 'hash'}}) do
  local kind = redis.call('TYPE', pair[1])['ok']
  if kind ~= 'none' and kind ~= pair[2] then
    return redis.error_reply('QUEUE_CORRUPT key ' .. pair[1] .. ' holds a ' .. kind
      .. ', expected a ' .. pair[2])
  end
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', K_SEEN, now, id)
redis.call('HSET', K_STATES, id, state)

local function forget(ids)
  if #ids > 0 then
    redis.call('ZREM', K_SEEN, unpack(ids, 1, #ids))
    redis.call('HDEL', K_STATES, unpack(ids, 1, #ids))
  end
  return #ids
end

local left = PRESENCE_TRIM - forget(
  redis.call('ZRANGEBYSCORE', K_SEEN, '-inf', '(' .. (now - retention), 'LIMIT', 0, PRESENCE_TRIM))
local over = redis.call('ZCARD', K_SEEN) - cap
if over > 0 and left > 0 then
  forget(redis.call('ZRANGE', K_SEEN, 0, math.min(over, left) - 1))
end
return now
