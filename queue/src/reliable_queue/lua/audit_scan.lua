-- audit_scan: one bounded step of the audit (read only): where are the ids of one
-- structure, and does each have a record?
-- KEYS[1..12]: see _common.lua
-- ARGV[1] kind: 'jobs' (HSCAN of the records), 'delayed' / 'active' / 'dead' / 'done'
--         (ZSCAN), 'ready' (LRANGE page)
-- ARGV[2] cursor: the SCAN cursor ('0' to start), or for 'ready' the start index
-- ARGV[3] count: entries per step (1..MAX_BATCH; SCAN's COUNT is a hint)
-- Returns: {next cursor ('0' when the structure is done), n1, ids..., n2, ids..., n3, ids...}:
--   three id lists, each preceded by its length:
--   1. kind 'jobs': records in no sorted set (in ready, or orphans: the caller checks);
--      kind 'ready': the page itself (the caller's snapshot of ready)
--   2. ids in two or more structures (doubles)
--   3. members with no record
--   A 'QUEUE_CORRUPT' / 'QUEUE_LIMIT' error for a key of the wrong type or a bad count.
-- Changes: nothing.
-- @include _common.lua
helpers()  -- off the drain's hot path: every helper, made up front
local kind, cursor, count = ARGV[1], ARGV[2], tonumber(ARGV[3])
local bad = check_count(count)
  or H.check({K_READY, K_DELAYED, K_ACTIVE, K_JOBS, K_DEAD, K_DONE})
if bad then return redis.error_reply(bad) end
local ZKEY = {delayed = K_DELAYED, active = K_ACTIVE, dead = K_DEAD, done = K_DONE}

-- in how many sorted sets (other than `skip`, a kind name) is id a member?
local function zcount(id, skip)
  local n = 0
  if skip ~= 'delayed' and redis.call('ZSCORE', K_DELAYED, id) then n = n + 1 end
  if skip ~= 'active' and redis.call('ZSCORE', K_ACTIVE, id) then n = n + 1 end
  if skip ~= 'dead' and redis.call('ZSCORE', K_DEAD, id) then n = n + 1 end
  if skip ~= 'done' and redis.call('ZSCORE', K_DONE, id) then n = n + 1 end
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
  end
elseif kind == 'ready' then
  local start = tonumber(cursor)
  first = redis.call('LRANGE', K_READY, start, start + count - 1)
  if #first == count then nxt = tostring(start + count) end
  for _, id in ipairs(first) do
    if redis.call('HEXISTS', K_JOBS, id) == 0 then missing[#missing + 1] = id end
    if zcount(id, nil) > 0 then doubles[#doubles + 1] = id end
  end
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
