-- locate: where one job really is (read only).
-- KEYS[1..12]: see _common.lua
-- ARGV[1] job id
-- Returns: {place, record exists 0/1}; place is the first structure holding the id, in
--   the order active, ready, delayed, dead, done, or '' when it is in none. The ready
--   check is one LPOS (O(length of ready), no script-side loop).
-- Changes: nothing.
-- @include _common.lua
helpers()  -- off the drain's hot path: every helper, made up front
local id = ARGV[1]
local has = redis.call('HEXISTS', K_JOBS, id)
local place = ''
if redis.call('ZSCORE', K_ACTIVE, id) then
  place = 'active'
elseif redis.call('LPOS', K_READY, id) then
  place = 'ready'
elseif redis.call('ZSCORE', K_DELAYED, id) then
  place = 'delayed'
elseif redis.call('ZSCORE', K_DEAD, id) then
  place = 'dead'
elseif redis.call('ZSCORE', K_DONE, id) then
  place = 'done'
end
return {place, has}
