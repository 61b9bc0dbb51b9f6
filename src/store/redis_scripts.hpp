// The Lua scripts the Redis store runs. They are DESIGN.md section 2 line for line, in the same
// operation order as src/limiter/token_bucket.cpp, so that both stores compute the same doubles
// and truncate them the same way (tests/integration/redis_store_test.cpp replays one sequence
// against both). Numbers cross the wire as %.17g strings, which round-trip doubles exactly.
#pragma once

namespace tollgate::store::scripts {

// KEYS[1] bucket, KEYS[2] optional parent (channel) bucket, decided all-or-nothing.
// ARGV[1] permits, ARGV[2] timeout_us, ARGV[3] mode (0 pay_now, 1 pay_later),
// ARGV[4] now_us ("" = Redis TIME: the only clock in production; a value only for replays/tests),
// then 7 numbers per bucket: interval, max_permits, cool_down, warm (0/1), threshold, cold_interval, slope.
// Returns {granted, wait_us, retry_after_us, remaining, max_permits, bound,
//          release1, cost1, spent1, release2, cost2, spent2} (doubles as strings).
inline constexpr const char* kAcquire = R"LUA(
local SAT = 9007199254740992 -- 2^53: the largest whole number a Lua double holds exactly
local function trunc(x)
  if x ~= x then return 0 end
  if x >= SAT then return SAT end
  if x >= 0 then return math.floor(x) end
  return math.ceil(x)
end
local function sat_add(a, b)
  local r = a + b
  if r > SAT then return SAT end
  return r
end
local function fmt(x) return string.format('%.17g', x) end

local now
if ARGV[4] ~= '' then
  now = tonumber(ARGV[4])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local permits = tonumber(ARGV[1])
local timeout = tonumber(ARGV[2])
local pay_later = ARGV[3] == '1'

local function shape(base)
  return {interval = tonumber(ARGV[base]), max = tonumber(ARGV[base + 1]), cool = tonumber(ARGV[base + 2]),
          warm = ARGV[base + 3] == '1', threshold = tonumber(ARGV[base + 4]),
          cold = tonumber(ARGV[base + 5]), slope = tonumber(ARGV[base + 6])}
end

local function resync(st, max, cool)
  if now > st.next then
    st.stored = math.min(max, st.stored + (now - st.next) / cool)
    st.next = now
  end
end

local function load(key, sh)
  local h = redis.call('HMGET', key, 's', 'n', 'm', 'c')
  if not h[1] then return {stored = sh.max, next = now} end -- missing: a full, rested bucket
  local st = {stored = tonumber(h[1]), next = tonumber(h[2])}
  local old_max, old_cool = tonumber(h[3]), tonumber(h[4])
  if old_max ~= sh.max or old_cool ~= sh.cool then
    st.rescaled = true -- kept even if this request is rejected, as the in-process store does
    -- The rule changed: resync with the old shape, rescale to the new maximum (Guava's setRate).
    resync(st, old_max, old_cool)
    if old_max > 0 then
      st.stored = st.stored * sh.max / old_max
    elseif sh.warm then
      st.stored = sh.max
    else
      st.stored = 0
    end
    st.stored = math.min(st.stored, sh.max)
  end
  return st
end

local function stored_cost(sh, stored, spend)
  if not sh.warm then return 0 end
  local micros = 0
  local above = stored - sh.threshold
  if above > 0 then
    local take = math.min(above, spend)
    local length = (sh.interval + above * sh.slope) + (sh.interval + (above - take) * sh.slope)
    micros = trunc(take * length / 2.0)
    spend = spend - take
  end
  return sat_add(micros, trunc(sh.interval * spend))
end

-- Decides on a copy: {granted, wait, retry, remaining, next, stored, cost, spent}
local function decide(st0, sh)
  local st = {stored = st0.stored, next = st0.next}
  resync(st, sh.max, sh.cool)
  local spend = math.min(permits, st.stored)
  local fresh = permits - spend
  local cost = sat_add(stored_cost(sh, st.stored, spend), trunc(fresh * sh.interval))
  local release = sat_add(st.next, cost)
  local ready = release
  if pay_later then ready = st.next end
  local wait = math.max(0, ready - now)
  if wait > timeout then
    return {granted = false, wait = 0, retry = ready - timeout - now, remaining = st.stored, next = st0.next,
            stored = st0.stored, cost = 0, spent = 0}
  end
  return {granted = true, wait = wait, retry = 0, remaining = st.stored - spend, next = release,
          stored = st.stored - spend, cost = cost, spent = spend}
end

local function save(key, r, sh)
  redis.call('HSET', key, 's', fmt(r.stored), 'n', fmt(r.next), 'm', fmt(sh.max), 'c', fmt(sh.cool))
  -- Expire when the bucket would be full anyway: a missing key then means the same thing.
  local ttl_us = (r.next - now) + (sh.max - r.stored) * sh.cool
  redis.call('PEXPIRE', key, math.floor(ttl_us / 1000) + 1000)
end

local sa = shape(5)
local a0 = load(KEYS[1], sa)
local a = decide(a0, sa)
if #KEYS == 1 then
  if a.granted then save(KEYS[1], a, sa) elseif a0.rescaled then save(KEYS[1], a0, sa) end
  return {a.granted and 1 or 0, a.wait, a.retry, fmt(a.remaining), fmt(sa.max), 0,
          a.next, a.cost, fmt(a.spent), 0, 0, '0'}
end
local sb = shape(12)
local b0 = load(KEYS[2], sb)
local b = decide(b0, sb)
if a.granted and b.granted then
  save(KEYS[1], a, sa)
  save(KEYS[2], b, sb)
  local bound, w, mx = 0, a.wait, sa.max
  if b.wait > a.wait then bound, w, mx = 1, b.wait, sb.max end
  return {1, w, 0, fmt(math.min(a.remaining, b.remaining)), fmt(mx), bound,
          a.next, a.cost, fmt(a.spent), b.next, b.cost, fmt(b.spent)}
end
if a0.rescaled then save(KEYS[1], a0, sa) end
if b0.rescaled then save(KEYS[2], b0, sb) end
local ra, rb = 0, 0
if not a.granted then ra = a.retry end
if not b.granted then rb = b.retry end
local bound, retry, mx = 0, ra, sa.max
if rb > ra then bound, retry, mx = 1, rb, sb.max end
return {0, 0, retry, fmt(math.min(a.remaining, b.remaining)), fmt(mx), bound, 0, 0, '0', 0, 0, '0'}
)LUA";

// KEYS[1], optional KEYS[2]; ARGV: release1, cost1, spent1, release2, cost2, spent2.
// Gives a reservation back if it is still the newest one of its bucket. Returns how many buckets did.
inline constexpr const char* kRefund = R"LUA(
local done = 0
for i = 1, #KEYS do
  local base = (i - 1) * 3
  local release, cost, spent = tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3])
  local h = redis.call('HMGET', KEYS[i], 's', 'n', 'm')
  if h[1] and tonumber(h[2]) == release then
    local stored = math.min(tonumber(h[3]), tonumber(h[1]) + spent)
    redis.call('HSET', KEYS[i], 's', string.format('%.17g', stored), 'n', string.format('%.17g', release - cost))
    done = done + 1
  end
end
return done
)LUA";

}  // namespace tollgate::store::scripts
