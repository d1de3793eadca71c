-- The load of `python -m benchmarks api --client wrk`: shops placing orders over HTTP.
--
-- Each request is POST /api/v1/orders with a new Idempotency-Key and a random order
-- (1-4 distinct parts). Each wrk thread sends on a schedule of its own: send times a
-- Poisson process of mean gap BENCH_GAP_MS milliseconds, each taken by the next of the
-- thread's connections to be free (a connection that is free early waits for its time;
-- one that comes late sends at once), so the offered rate, `threads * 1000 /
-- BENCH_GAP_MS` orders/s, does not fall when replies slow down, as long as a connection
-- is free. wrk's latency is each request's time from its send to its reply.
-- At the end one JSON line: 201s, other replies, requests, seconds, percentiles (ms),
-- transport errors, and the requests sent but not answered when the time was up.
-- Environment: BENCH_TOKEN, BENCH_GAP_MS, BENCH_CUSTOMERS, BENCH_PARTS.
local ffi = require("ffi")
ffi.cdef([[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clock_id, bench_timespec *tp);
]])
local CLOCK_MONOTONIC = 1
local clock = ffi.new("bench_timespec")
local function now_ms()
   ffi.C.clock_gettime(CLOCK_MONOTONIC, clock)
   return tonumber(clock.tv_sec) * 1000 + tonumber(clock.tv_nsec) / 1e6
end

local token = os.getenv("BENCH_TOKEN") or ""
local gap_ms = tonumber(os.getenv("BENCH_GAP_MS") or "0")
local next_due = nil
local customers = tonumber(os.getenv("BENCH_CUSTOMERS") or "1500")
local parts = tonumber(os.getenv("BENCH_PARTS") or "2000")
local threads = {}
local next_id = 0
local counter = 0
-- read back from each thread by done(): globals, not locals
sent = 0
created = 0
other = 0

function setup(thread)
   next_id = next_id + 1
   thread:set("tid", next_id)
   table.insert(threads, thread)
end

function init(args)
   math.randomseed(os.time() * 1000 + tid)
end

function delay()
   if gap_ms <= 0 then return 0 end
   local now = now_ms()
   if next_due == nil then next_due = now end
   next_due = next_due - math.log(1 - math.random()) * gap_ms
   if next_due <= now then return 0 end
   return math.floor(next_due - now)
end

function request()
   sent = sent + 1
   counter = counter + 1
   local n = math.random(1, 4)
   local chosen, lines = {}, {}
   while #lines < n do
      local p = math.random(1, parts)
      if not chosen[p] then
         chosen[p] = true
         lines[#lines + 1] = string.format('{"part_id": %d, "quantity": %d}', p, math.random(1, 5))
      end
   end
   local body = string.format('{"customer_id": %d, "lines": [%s]}',
      math.random(1, customers), table.concat(lines, ", "))
   local key = string.format("wrk-%d-%d-%d-%d", tid, os.time(), math.random(0, 2147483647), counter)
   return wrk.format("POST", "/api/v1/orders", {
      ["Authorization"] = "Bearer " .. token,
      ["Idempotency-Key"] = key,
      ["Content-Type"] = "application/json",
   }, body)
end

function response(status, headers, body)
   if status == 201 then created = created + 1 else other = other + 1 end
end

function done(summary, latency, requests)
   local s, c, o = 0, 0, 0
   for _, t in ipairs(threads) do
      s = s + t:get("sent")
      c = c + t:get("created")
      o = o + t:get("other")
   end
   local e = summary.errors
   io.write(string.format(
      '{"created": %d, "other": %d, "requests": %d, "seconds": %.3f, "p50_ms": %.3f, '
      .. '"p90_ms": %.3f, "p99_ms": %.3f, "max_ms": %.3f, "transport_errors": %d, '
      .. '"unanswered": %d}\n',
      c, o, summary.requests, summary.duration / 1e6,
      latency:percentile(50) / 1000, latency:percentile(90) / 1000,
      latency:percentile(99) / 1000, latency.max / 1000,
      e.connect + e.read + e.write + e.timeout,
      s - c - o))
end
