-- audit_scan: one bounded step of the audit (read only): where are the ids of one
-- structure, and does each have a record?
-- KEYS[1..19]: see _common.lua
-- ARGV[1] kind: 'jobs' (HSCAN of the records), 'delayed' / 'active' / 'dead' / 'done' /
--         'waiting' (ZSCAN), 'ready' (LRANGE page), 'flow' / 'tags' (HSCAN), 'running'
--         (ZSCAN) (ADR 0033)
-- ARGV[2] cursor: the SCAN cursor ('0' to start), or for 'ready' the start index
-- ARGV[3] count: entries per step (1..MAX_BATCH; SCAN's COUNT is a hint)
-- Returns: {next cursor ('0' when the structure is done), n1, items..., n2, ids..., n3,
--   ids...}: three lists, each preceded by its length:
--   1. kind 'jobs': records in no sorted set (in ready, or orphans: the caller checks);
--      kind 'ready': the page itself (the caller's snapshot of ready); kind 'waiting':
--      id, score, flow value ('' for none) of each member; kind 'flow': ids whose
--      record is gone (stale values) and ids whose value is not "[f]<0-9>|<key>"
--      (malformed: each as id, '!'); kind 'running': members whose job is not active,
--      or whose shape or key does not match its job's flow value (stale slots); kind
--      'tags': field, value of each entry (the caller judges them)
--   2. ids in two or more structures (doubles)
--   3. members with no record
--   A 'QUEUE_CORRUPT' / 'QUEUE_LIMIT' error for a key of the wrong type or a bad count.
-- Changes: nothing.
-- @include _common.lua
helpers()  -- off the drain's hot path: every helper, made up front
local kind, cursor, count = ARGV[1], ARGV[2], tonumber(ARGV[3])
local bad = check_count(count)
  or H.check({K_READY, K_DELAYED, K_ACTIVE, K_JOBS, K_DEAD, K_DONE, K_WAITING, K_FLOW,
              K_TAGS, K_RUNNING})
if bad then return redis.error_reply(bad) end
local ZKEY = {delayed = K_DELAYED, active = K_ACTIVE, dead = K_DEAD, done = K_DONE,
              waiting = K_WAITING}

-- in how many sorted sets (other than `skip`, a kind name) is id a member?
local function zcount(id, skip)
  local n = 0
  if skip ~= 'delayed' and redis.call('ZSCORE', K_DELAYED, id) then n = n + 1 end
  if skip ~= 'active' and redis.call('ZSCORE', K_ACTIVE, id) then n = n + 1 end
  if skip ~= 'dead' and redis.call('ZSCORE', K_DEAD, id) then n = n + 1 end
  if skip ~= 'done' and redis.call('ZSCORE', K_DONE, id) then n = n + 1 end
  if skip ~= 'waiting' and redis.call('ZSCORE', K_WAITING, id) then n = n + 1 end
  return n
end

local first, doubles, missing = {}, {}, {}
local nxt = '0'
if kind == 'jobs' then
  local r = redis.call('HSCAN', K_JOBS, cursor, 'COUNT', count)
  nxt = r[1]
  for i = 1, #r[2], 2 do
    local id = r[2][i]
    local n = zcount(id, nil)
    if n == 0 then first[#first + 1] = id elseif n > 1 then doubles[#doubles + 1] = id end
  end
elseif ZKEY[kind] then
  local K_SCANNED = ZKEY[kind]
  local r = redis.call('ZSCAN', K_SCANNED, cursor, 'COUNT', count)
  nxt = r[1]
  for i = 1, #r[2], 2 do
    local id = r[2][i]
    if redis.call('HEXISTS', K_JOBS, id) == 0 then missing[#missing + 1] = id end
    if zcount(id, kind) > 0 then doubles[#doubles + 1] = id end
    if kind == 'waiting' then
      first[#first + 1] = id
      first[#first + 1] = r[2][i + 1]
      first[#first + 1] = redis.call('HGET', K_FLOW, id) or ''
    end
  end
elseif kind == 'ready' then
  local start = tonumber(cursor)
  first = redis.call('LRANGE', K_READY, start, start + count - 1)
  if #first == count then nxt = tostring(start + count) end
  for _, id in ipairs(first) do
    if redis.call('HEXISTS', K_JOBS, id) == 0 then missing[#missing + 1] = id end
    if zcount(id, nil) > 0 then doubles[#doubles + 1] = id end
  end
elseif kind == 'flow' then
  local r = redis.call('HSCAN', K_FLOW, cursor, 'COUNT', count)
  nxt = r[1]
  for i = 1, #r[2], 2 do
    local id = r[2][i]
    if redis.call('HEXISTS', K_JOBS, id) == 0 then
      first[#first + 1] = id
    elseif not H.parse_flow(r[2][i + 1]) then
      first[#first + 1] = id
      first[#first + 1] = '!'
    end
  end
elseif kind == 'running' then
  local r = redis.call('ZSCAN', K_RUNNING, cursor, 'COUNT', count)
  nxt = r[1]
  for i = 1, #r[2], 2 do
    local m = r[2][i]
    local at = string.find(m, '\0', 1, true)
    local ok = false
    if at then
      local id = string.sub(m, at + 1)
      local _, k = H.parse_flow(redis.call('HGET', K_FLOW, id))
      ok = redis.call('ZSCORE', K_ACTIVE, id) and k == string.sub(m, 1, at - 1)
    end
    if not ok then first[#first + 1] = m end
  end
elseif kind == 'tags' then
  local r = redis.call('HSCAN', K_TAGS, cursor, 'COUNT', count)
  nxt = r[1]
  first = r[2]
else
  return redis.error_reply('QUEUE_LIMIT unknown audit kind ' .. kind)
end
local out = {nxt, #first}
for _, id in ipairs(first) do out[#out + 1] = id end
out[#out + 1] = #doubles
for _, id in ipairs(doubles) do out[#out + 1] = id end
out[#out + 1] = #missing
for _, id in ipairs(missing) do out[#out + 1] = id end
return out
