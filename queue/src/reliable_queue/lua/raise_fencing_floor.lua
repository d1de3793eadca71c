-- raise_fencing_floor: lift the fencing sequence to at least a number the application
-- has seen (the highest token its database recorded), so every later lease token is
-- above it, also after Redis lost writes (ADR 0022).
-- KEYS[1..12]: see _common.lua (only seq is read and written)
-- ARGV[1] floor   a decimal integer, 0..FLOOR_MAX
-- Returns: the sequence after the call, max(seq, floor), as a decimal string (the next
--   lease gets a higher number). A 'QUEUE_LIMIT' error for a floor that is not such an
--   integer, a 'QUEUE_CORRUPT' error when seq is not a string holding an integer up to
--   FENCE_MAX; nothing written either way.
-- Changes: seq (only when the floor is above it).
-- @include _common.lua
local FLOOR_MAX = 4503599627370496  -- 2^52: room above it for the sequence to grow
local floor = ARGV[1]
if not (floor and #floor <= 16 and string.match(floor, '^%d+$')
        and tonumber(floor) <= FLOOR_MAX) then
  return redis.error_reply('QUEUE_LIMIT a fencing floor is an integer 0..'
    .. string.format('%d', FLOOR_MAX))
end
local seq = redis.pcall('GET', K_SEQ)  -- also the type check of seq
if type(seq) == 'table' then return redis.error_reply(corrupt(K_SEQ, 'string')) end
if seq and not (#seq <= 16 and string.match(seq, '^%d+$') and tonumber(seq) <= FENCE_MAX) then
  return redis.error_reply('QUEUE_CORRUPT key ' .. K_SEQ .. ' is not an integer up to '
    .. string.format('%d', FENCE_MAX))
end
local current, wanted = tonumber(seq or '0'), tonumber(floor)
if wanted <= current then return string.format('%d', current) end
-- validated: no command below can fail
redis.call('SET', K_SEQ, string.format('%d', wanted))
return string.format('%d', wanted)
