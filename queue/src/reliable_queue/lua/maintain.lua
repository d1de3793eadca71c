-- maintain: one bounded step of upkeep: drop dead letters past the age / size bounds
-- and finished records past the retention window, at most TRIM_STEP of each.
-- KEYS[1..19]: see _common.lua
-- ARGV[1] dlq max size   ARGV[2] dlq max age ms   ARGV[3] retention ms
-- Returns: {dead letters dropped, finished records dropped}; a caller repeats while
--   either equals the step (more may be left). A 'QUEUE_CORRUPT' error (nothing
--   written) for a key of the wrong type.
-- Changes: dead, done, jobs, attempts, info, flow, stats dlq_dropped, the queue clock's stats
--          fields (see _common.lua).
-- @include _common.lua
helpers()  -- off the drain's hot path: every helper, made up front
local bad = H.check({K_DEAD, K_DONE, K_JOBS, K_ATTEMPTS, K_INFO, K_STATS, K_FLOW},
                    {'dlq_dropped'})
if bad then return redis.error_reply(bad) end
local now = queue_now()  -- stats was checked above
local dropped = H.trim_dead(now, tonumber(ARGV[1]), tonumber(ARGV[2]))
local expired = H.trim_done(now, tonumber(ARGV[3]), TRIM_STEP)
save_clock()
return {dropped, expired, TRIM_STEP}
