// The Lua scripts the Redis store runs. They are DESIGN.md section 2 line for line, in the same
// operation order as src/limiter/token_bucket.cpp, so that both stores compute the same doubles
// and truncate them the same way (tests/integration/redis_store_test.cpp replays one sequence
// against both). Numbers cross the wire as %.17g strings or as the shortest text of the same
// double (std::to_chars), both of which Lua's tonumber reads back exactly; Redis writes a Lua
// number handed to redis.call as %.17g.
#pragma once

#include <string>

namespace tollgate::store::scripts {

// The adaptive rate of issue 17 (src/limiter/adaptive_rate.cpp), the same operations in the same
// order, at the start of kAcquire and kAdapt as one function that makes them: a script pays for
// each closure it creates on every call, so the general script makes them only for an adaptive
// bucket. Its state is a hash beside the bucket's (same hash tag): w w_max, e epoch, l last,
// g last_signal, p pause_until, s demand second, c this second's arrivals, q the previous
// second's, x the measured rate of grants, y when it was measured. A missing hash is a rule that
// never adapted.
inline constexpr const char* kAdaptiveLua = R"LUA(
local function adaptive_lib()
  local A_BETA, A_C, A_DEBOUNCE, A_MAX_PAUSE, A_FORGET = 0.7, 0.4, 500000, 60000000, 600000000
  local A_FLOOR_SHARE, A_MIN_FLOOR, A_SENT_WINDOW = 0.02, 0.1, 2e6
  local function a_load(key)
    local h = redis.call('HMGET', key, 'w', 'e', 'l', 'g', 'p', 's', 'c', 'q', 'x', 'y')
    return {wmax = tonumber(h[1]) or 0, epoch = tonumber(h[2]) or 0, last = tonumber(h[3]) or 0,
            signal = tonumber(h[4]) or -9007199254740992, pause = tonumber(h[5]) or 0,
            ds = tonumber(h[6]) or 0, dc = tonumber(h[7]) or 0, dp = tonumber(h[8]) or 0,
            sent = tonumber(h[9]) or 0, sat = tonumber(h[10]) or 0}
  end
  local function a_save(key, st)
    redis.call('HSET', key, 'w', string.format('%.17g', st.wmax), 'e', st.epoch, 'l', st.last, 'g', st.signal,
               'p', st.pause, 's', st.ds, 'c', string.format('%.17g', st.dc), 'q', string.format('%.17g', st.dp),
               'x', string.format('%.17g', st.sent), 'y', st.sat)
    redis.call('PEXPIRE', key, A_FORGET / 1000)
  end
  local function a_floor(conf)
    local f = conf * A_FLOOR_SHARE
    if f < A_MIN_FLOOR then f = A_MIN_FLOOR end
    if f > conf then f = conf end
    return f
  end
  local function a_note(st, t, permits)
    local sec = math.floor(t / 1e6)
    if sec > st.ds then
      if sec == st.ds + 1 then st.dp = st.dc else st.dp = 0 end
      st.dc = 0
      st.ds = sec
    end
    st.dc = st.dc + permits
  end
  local function a_demand(st, t)
    local sec = math.floor(t / 1e6)
    local elapsed = t - sec * 1000000
    local left = (1e6 - elapsed) / 1e6
    if sec <= st.ds then return st.dp * left + st.dc end
    if sec == st.ds + 1 then return st.dc * left end
    return 0
  end
  local function a_sent(st, t)
    if t <= st.sat then return st.sent end
    return st.sent * math.exp(-(t - st.sat) / A_SENT_WINDOW)
  end
  local function a_grant(st, t, permits)
    st.sent = a_sent(st, t) + permits * 1e6 / A_SENT_WINDOW
    if t > st.sat then st.sat = t end
  end
  local function a_curve(st, t)
    local x = (t - st.epoch) / 1e6
    if x < 0 then x = 0 end
    local k = (st.wmax * (1 - A_BETA) / A_C) ^ (1.0 / 3.0)
    local d = x - k
    return A_C * d * d * d + st.wmax
  end
  local function a_effective(st, conf, t)
    if st.wmax > 0 and t - st.last > A_FORGET and st.pause <= t then st.wmax = 0 end
    if not (st.wmax > 0) then return conf end
    if t > st.last then
      local from = st.last
      if st.epoch > from then from = st.epoch end
      if t > from and a_demand(st, t) < a_curve(st, t) then st.epoch = st.epoch + (t - from) end
      st.last = t
    end
    local w = a_curve(st, t)
    if w >= conf then
      st.wmax = 0
      return conf
    end
    local rate = w
    local d = a_demand(st, t)
    if rate > d then rate = d end
    local fl = a_floor(conf)
    if rate < fl then rate = fl end
    return rate
  end
  return {load = a_load, save = a_save, note = a_note, demand = a_demand, effective = a_effective,
          sent = a_sent, grant = a_grant, floor = a_floor, BETA = A_BETA, DEBOUNCE = A_DEBOUNCE,
          MAX_PAUSE = A_MAX_PAUSE}
end
)LUA";

// One request's checks, all-or-nothing (issue 7): up to two buckets, window quotas, maxShare.
// KEYS: [bucket] [parent] quota1..quotaN [share]  (which are present: ARGV[5..8])
// ARGV[1] permits, ARGV[2] timeout_us, ARGV[3] mode (0 pay_now, 1 pay_later),
// ARGV[4] now_us ("" = Redis TIME: the only clock in production; a value only for replays/tests),
// ARGV[5] has bucket (0/1), ARGV[6] has parent (0/1), ARGV[7] number of quotas, ARGV[8] max held (0: no share),
// ARGV[9] adaptive (0 off, 1 on, 2 shadow: then KEYS has the bucket's adaptive hash right after the bucket),
// then 7 numbers per present bucket: interval, max_permits, cool_down, warm (0/1), threshold, cold_interval, slope,
// and after the bucket's, when adaptive, its configured rate and burst ('' unset),
// then 3 per quota: period_us, limit, algorithm (0 fixed, 1 sliding).
// Returns {granted, wait_us, retry_after_us, remaining, max_permits, bound (0 bucket, 1 parent, 2 share, 3 quota),
//          bound_quota (rejected) or the maxShare grant's release (granted), release1, cost1, spent1, release2, cost2, spent2,
//          then per quota: admitted, used, remaining, retry_after_us, reset_us,
//          then when adaptive: effective rate, pause left (us)} (doubles as strings).
inline constexpr const char* kAcquireBody = R"LUA(
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
local has_a, has_b = ARGV[5] == '1', ARGV[6] == '1'
local nq, max_held = tonumber(ARGV[7]), tonumber(ARGV[8])
local adaptive = tonumber(ARGV[9])

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
    if old_max > 0 and st.stored >= old_max then
      st.stored = sh.max -- full stays full (as a missing hash would be), not a rounding below it
    elseif old_max > 0 then
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

-- Decides on a copy: {granted, wait, retry, remaining, next, stored, cost, spent, synced}
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
            stored = st0.stored, cost = 0, spent = 0, synced = st.stored}
  end
  return {granted = true, wait = wait, retry = 0, remaining = st.stored - spend, next = release,
          stored = st.stored - spend, cost = cost, spent = spend, synced = st.stored}
end

local function save(key, r, sh)
  redis.call('HSET', key, 's', fmt(r.stored), 'n', fmt(r.next), 'm', fmt(sh.max), 'c', fmt(sh.cool))
  -- Expire when the bucket would be full anyway: a missing key then means the same thing.
  local ttl_us = (r.next - now) + (sh.max - r.stored) * sh.cool
  redis.call('PEXPIRE', key, math.floor(ttl_us / 1000) + 1000)
end

-- Window quotas: src/limiter/window.cpp, same operations in the same order.
local function window_index(period)
  local idx = math.floor(now / period)
  if idx * period > now then idx = idx - 1 end
  if (idx + 1) * period <= now then idx = idx + 1 end
  return idx
end
local function estimate(prev, cur, period, elapsed) return prev * ((period - elapsed) / period) + cur end
local function sliding_fit(prev, cur, q, n)
  local need = q.limit - n - cur
  if need < 0 then return q.period end
  if prev <= need then return 0 end
  local e = math.ceil(q.period - need * q.period / prev)
  if e < 0 then e = 0 elseif e > q.period then e = q.period end
  while e < q.period and estimate(prev, cur, q.period, e) + n > q.limit do e = e + 1 end
  return e
end
local function wcheck(st, q, n)
  local start = st.w * q.period
  local elapsed = now - start
  local d = {admitted = false, used = 0, retry = 0, reset = start + q.period - now}
  if q.sliding then d.used = estimate(st.p, st.c, q.period, elapsed) else d.used = st.c end
  if n > q.limit then
    d.retry = SAT
  elseif not q.sliding then
    d.admitted = st.c + n <= q.limit
    if not d.admitted then d.retry = d.reset end
  else
    d.admitted = d.used + n <= q.limit
    if not d.admitted then
      local e = sliding_fit(st.p, st.c, q, n)
      if e < q.period and e > elapsed then d.retry = e - elapsed
      else d.retry = d.reset + sliding_fit(st.c, 0, q, n) end
    end
  end
  local remaining = q.limit - d.used
  if d.admitted then remaining = remaining - n end
  d.remaining = math.max(0, remaining)
  return d
end

local function num(i) return tonumber(ARGV[i]) end
local ki, base = 1, 10
local ka, kb, sa, sb
if has_a then ka, sa, ki, base = KEYS[ki], shape(base), ki + 1, base + 7 end
-- Adaptive: the arrival counts as demand, and with `on` the bucket decides at the effective rate
-- (its shape made here from that rate, as limiter::effective_params and shape_of make it).
local A, ad, kad, eff, pause_left = nil, nil, nil, 0, 0
if has_a and adaptive > 0 then
  kad = KEYS[ki]
  local conf, burst = tonumber(ARGV[base]), ARGV[base + 1]
  ki, base = ki + 1, base + 2
  A = adaptive_lib()
  ad = A.load(kad)
  A.note(ad, now, permits)
  eff = A.effective(ad, conf, now)
  if adaptive == 1 then
    local mx = eff
    if burst ~= '' then mx = tonumber(burst) * eff / conf end
    local interval = 1e6 / eff
    sa = {interval = interval, max = mx, cool = interval, warm = false, threshold = 0, cold = 0, slope = 0}
    if ad.pause > now then pause_left = ad.pause - now end
  end
end
if has_b then kb, sb, ki, base = KEYS[ki], shape(base), ki + 1, base + 7 end

local a0, b0, a, b
local bd = {granted = true, wait = 0, retry = 0, remaining = 0}
local bound, bound_quota, mx = 0, 0, 0
local r1, r2 = {0, 0, 0}, {0, 0, 0}
if has_a then a0 = load(ka, sa); a = decide(a0, sa) end
if has_b then b0 = load(kb, sb); b = decide(b0, sb) end
if a and b then
  if a.granted and b.granted then
    bd = {granted = true, wait = a.wait, retry = 0, remaining = math.min(a.remaining, b.remaining)}
    mx = sa.max
    if b.wait > a.wait then bd.wait, bound, mx = b.wait, 1, sb.max end
    r1, r2 = {a.next, a.cost, a.spent}, {b.next, b.cost, b.spent}
  else
    local ra, rb = 0, 0
    if not a.granted then ra = a.retry end
    if not b.granted then rb = b.retry end
    bd = {granted = false, wait = 0, retry = ra, remaining = math.min(a.remaining, b.remaining)}
    mx = sa.max
    if rb > ra then bd.retry, bound, mx = rb, 1, sb.max end
  end
elseif a or b then
  local x, sx = a, sa
  if b then x, sx, bound = b, sb, 1 end
  bd = {granted = x.granted, wait = x.wait, retry = x.retry, remaining = x.remaining}
  mx = sx.max
  if x.granted then
    if a then r1 = {x.next, x.cost, x.spent} else r2 = {x.next, x.cost, x.spent} end
  end
end
local all = bd.granted
local retry = bd.retry
if not bd.granted then retry = bd.retry else retry = 0 end

local n = math.ceil(permits)
local quotas, qout = {}, {}
for i = 1, nq do
  local q = {period = num(base), limit = num(base + 1), sliding = ARGV[base + 2] == '1', algo = ARGV[base + 2]}
  base = base + 3
  local key = KEYS[ki]
  ki = ki + 1
  local h = redis.call('HMGET', key, 'w', 'c', 'p', 'P', 'L', 'A')
  local st
  if h[1] and tonumber(h[4]) == q.period and tonumber(h[5]) == q.limit and h[6] == q.algo then
    st = {w = tonumber(h[1]), c = tonumber(h[2]), p = tonumber(h[3])}
  else
    st = {w = window_index(q.period), c = 0, p = 0} -- new, or the quota was edited: start over
  end
  local idx = window_index(q.period)
  if st.w ~= idx then
    if st.w == idx - 1 then st.p = st.c else st.p = 0 end
    st.c = 0
    st.w = idx
  end
  local d = wcheck(st, q, n)
  if not d.admitted then
    if all or d.retry > retry then bound, bound_quota, retry = 3, i - 1, d.retry end
    all = false
  end
  quotas[i] = {key = key, st = st, q = q}
  local adm = 0
  if d.admitted then adm = 1 end
  table.insert(qout, adm)
  table.insert(qout, fmt(d.used))
  table.insert(qout, fmt(d.remaining))
  table.insert(qout, d.retry)
  table.insert(qout, d.reset)
end

local share_key
if max_held > 0 and bd.granted and bd.wait > 0 then
  share_key = KEYS[ki]
  redis.call('ZREMRANGEBYSCORE', share_key, '-inf', now)
  if redis.call('ZCARD', share_key) >= max_held then
    local first = redis.call('ZRANGE', share_key, 0, 0, 'WITHSCORES')
    local free_at = tonumber(first[2]) - now
    if all or free_at > retry then bound, retry = 2, free_at end
    all = false
  end
end

if not all then
  if a0 and a0.rescaled then save(ka, a0, sa) end
  if b0 and b0.rescaled then save(kb, b0, sb) end
  local remaining = bd.remaining
  if bd.granted then
    remaining = 0
    if a and b then remaining = math.min(a.synced, b.synced) elseif a then remaining = a.synced
    elseif b then remaining = b.synced end
  end
  local out = {0, 0, retry, fmt(remaining), fmt(mx), bound, bound_quota, 0, 0, '0', 0, 0, '0'}
  for _, v in ipairs(qout) do table.insert(out, v) end
  if ad then
    A.save(kad, ad)
    table.insert(out, fmt(eff))
    table.insert(out, pause_left)
  end
  return out
end
if a then save(ka, a, sa) end
if b then save(kb, b, sb) end
for i = 1, nq do
  local x = quotas[i]
  x.st.c = x.st.c + n
  redis.call('HSET', x.key, 'w', x.st.w, 'c', x.st.c, 'p', x.st.p, 'P', fmt(x.q.period), 'L', fmt(x.q.limit), 'A', x.q.algo)
  local ends = (x.st.w + 1) * x.q.period
  if x.q.sliding then ends = ends + x.q.period end
  redis.call('PEXPIRE', x.key, math.floor((ends - now) / 1000) + 1)
end
local share_release = 0
if share_key then
  share_release = now + bd.wait
  redis.call('ZADD', share_key, share_release, fmt(share_release))
  redis.call('PEXPIRE', share_key, math.floor(bd.wait / 1000) + 1)
end
local out = {1, bd.wait, 0, fmt(bd.remaining), fmt(mx), bound, share_release, r1[1], r1[2], fmt(r1[3]), r2[1], r2[2], fmt(r2[3])}
for _, v in ipairs(qout) do table.insert(out, v) end
if ad then
  A.grant(ad, now, permits)
  A.save(kad, ad)
  table.insert(out, fmt(eff))
  table.insert(out, pause_left)
end
return out
)LUA";
inline const std::string kAcquire = std::string(kAdaptiveLua) + kAcquireBody;

// The common case, lean: one bucket, no channel bucket, no quotas, no maxShare, for one decision or
// a batch of them on the same bucket (the decisions that arrived while the previous call for the
// bucket was in flight). The same arithmetic as kAcquire on the same hash (fields s, n, m, c, so
// that every script reads what another wrote), with nothing else: one HMGET, the decisions in
// arrival order at one Redis TIME on the state in memory, then at most one HSET and one PEXPIRE; no
// write when nothing was granted unless the rule changed (the rescaled state is kept, as the
// in-process store keeps it). A script runs atomically, so a batch decides exactly as separate
// calls at that instant would. Flat code: each call pays only for what it runs. What it costs
// Redis is mostly number conversion, so it converts as little as it can:
//  - strings become numbers by arithmetic (x + 0: one strtod), not tonumber (two: it checks first);
//  - the shape is sent as %.17g text and stored as that text (m, c), so that an unchanged rule is
//    recognised by comparing strings; only if they differ are they compared as numbers;
//  - a whole remaining or spent count goes back as an integer, with no string.format.
// Numbers handed to redis.call are written by Redis as %.17g, hence exactly (formatting them in
// Lua instead, with '%d' where whole, measured no cheaper).
// Refunds of lean requests join the same batches: a caller that left while held gives its slot
// back in its place in the bucket's queue, exactly as kRefund would in a call of its own at that
// instant (the same abandoned set, member format and bound). The hash is read once and written
// once; the set is touched only by refund entries. A rule edit is applied at the batch's first
// decision, not before: a refund queued ahead of it sees the state it would have seen alone.
// KEYS[1] the bucket, KEYS[2] its set of abandoned slots (touched only by refunds).
// ARGV[1] now_us ("" = Redis TIME, as in kAcquire), ARGV[2] flags: 1 pay_later, + 2 with warm-up,
// + 4 with refunds, ARGV[3] interval_us, ARGV[4] max_permits, with warm-up ARGV[5] cool_down_us,
// ARGV[6] threshold, ARGV[7] slope (without it cool_down = interval), with refunds then the most
// abandoned slots kept; then per entry, in arrival order: a decision (permits, timeout_us) or a
// refund ('r', release_us, cost_us, spent).
// Returns per entry, in order: {1, wait_us, release_us, cost_us, remaining, spent} for a grant,
// {0, retry_after_us, remaining} for a rejection (remaining and spent: integers when whole, else
// %.17g strings), {2, reservations given back, 1 if remembered else 0} for a refund.
inline constexpr const char* kAcquireLean = R"LUA(
local SAT = 9007199254740992 -- 2^53, as in kAcquire
local min, floor, ceil = math.min, math.floor, math.ceil
local now
if ARGV[1] ~= '' then
  now = ARGV[1] + 0
else
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local flags = ARGV[2] + 0
local pay_later, warm, refunds = flags % 2 == 1, flags % 4 >= 2, flags >= 4
local interval, max = ARGV[3] + 0, ARGV[4] + 0
local max_text, cool_text = ARGV[4], ARGV[3]
local cool, threshold, slope, i = interval, 0, 0, 5
if warm then
  cool_text = ARGV[5]
  cool, threshold, slope, i = cool_text + 0, ARGV[6] + 0, ARGV[7] + 0, 8
end
local key = KEYS[1]

local h, cap, k
if refunds then
  cap = ARGV[i] + 0
  i = i + 1
  h = redis.call('HMGET', key, 's', 'n', 'm', 'c', 'k')
  k = h[5]
else
  h = redis.call('HMGET', key, 's', 'n', 'm', 'c')
end
-- The state as stored (exists: the hash has it, or a grant of this batch made it) and the shape
-- it is kept in (om, oc); `shaped` once the batch's first decision has brought it to this rule.
local exists, stored, nxt, same, shaped, rescaled = false, max, now, false, false, false
local om, oc = max, cool
if h[1] then
  exists, stored, nxt = true, h[1] + 0, h[2] + 0
  same = h[3] == max_text and h[4] == cool_text
  if not same then
    om, oc = h[3] + 0, h[4] + 0
    same = om == max and oc == cool -- the same shape, written as other text
  end
end

-- Sized for one grant by its constructor (Lua grows an empty table four times on the way to six
-- items); `o` counts what is filled, and a nil after it ends the reply.
local out, o, granted, given_any, kdirty = {0, 0, 0, 0, 0, 0}, 0, false, false, false
local n_args = #ARGV
while i <= n_args do
  if ARGV[i] ~= 'r' then
    local permits, timeout = ARGV[i] + 0, ARGV[i + 1] + 0
    i = i + 2
    if not shaped then
      shaped = true
      if exists and not same then
        -- The rule changed: resync with the old shape, rescale to the new maximum (Guava's setRate).
        rescaled = true
        if now > nxt then
          stored = min(om, stored + (now - nxt) / oc)
          nxt = now
        end
        if om > 0 and stored >= om then
          stored = max -- full stays full (as in kAcquire)
        elseif om > 0 then
          stored = stored * max / om
        elseif warm then
          stored = max
        else
          stored = 0
        end
        stored = min(stored, max)
      end
      om, oc = max, cool
    end
    -- resync on a copy
    local s, n = stored, nxt
    if now > n then
      s = min(max, s + (now - n) / cool)
      n = now
    end
    local spend = min(permits, s)
    local fresh = permits - spend
    -- Each cost term truncated toward zero on its own and saturated at SAT (kAcquire's trunc, sat_add).
    -- No fresh permit, no cost (the interval is finite).
    local cost = 0
    if fresh ~= 0 then
      cost = fresh * interval
      if cost ~= cost then cost = 0 elseif cost >= SAT then cost = SAT
      elseif cost >= 0 then cost = floor(cost) else cost = ceil(cost) end
    end
    if warm then
      local micros, take_rest = 0, spend
      local above = s - threshold
      if above > 0 then
        local take = min(above, spend)
        local length = (interval + above * slope) + (interval + (above - take) * slope)
        micros = take * length / 2.0
        if micros ~= micros then micros = 0 elseif micros >= SAT then micros = SAT
        elseif micros >= 0 then micros = floor(micros) else micros = ceil(micros) end
        take_rest = spend - take
      end
      local rest = interval * take_rest
      if rest ~= rest then rest = 0 elseif rest >= SAT then rest = SAT
      elseif rest >= 0 then rest = floor(rest) else rest = ceil(rest) end
      local sc = micros + rest
      if sc > SAT then sc = SAT end
      cost = sc + cost
      if cost > SAT then cost = SAT end
    end
    local release = n + cost
    if release > SAT then release = SAT end
    local ready = release
    if pay_later then ready = n end
    local wait = ready - now
    if wait < 0 then wait = 0 end
    if wait > timeout then
      if s % 1 ~= 0 or s >= SAT then s = string.format('%.17g', s) end
      out[o + 1], out[o + 2], out[o + 3] = 0, ready - timeout - now, s
      o = o + 3
    else
      stored, nxt, granted, exists = s - spend, release, true, true
      local rem = stored
      if rem % 1 ~= 0 or rem >= SAT then rem = string.format('%.17g', rem) end
      if spend % 1 ~= 0 or spend >= SAT then spend = string.format('%.17g', spend) end
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = 1, wait, release, cost, rem, spend
      o = o + 6
    end
  else
    -- A refund: kRefund's body for one bucket, on the state in memory.
    local release, cost, spent = ARGV[i + 1] + 0, ARGV[i + 2] + 0, ARGV[i + 3] + 0
    i = i + 4
    local set = KEYS[2]
    local given, kept = 0, 0
    local function fmt(x) return string.format('%.17g', x) end
    if not k then redis.call('DEL', set) end
    if exists then
      redis.call('ZREMRANGEBYSCORE', set, '-inf', fmt(now)) -- released slots are not refundable
      if release > now and release < nxt then
        k = (k or 0) + 1
        kdirty = true
        local flag = '0'
        if cost == 0 then flag = '1' end
        local member = flag .. string.format('%015d', k) .. ':' .. fmt(cost) .. ':' .. fmt(spent)
        redis.call('ZADD', set, fmt(release), member)
        kept = 1
        if redis.call('ZCARD', set) > cap then -- full: forget the earliest (possibly this one)
          redis.call('ZREMRANGEBYRANK', set, 0, 0)
          if not redis.call('ZSCORE', set, member) then kept = 0 end
        end
        local top = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')
        if top[2] then redis.call('PEXPIRE', set, floor((tonumber(top[2]) - now) / 1000) + 1000) end
      elseif release > now and release == nxt then
        local function newest()
          local t = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')
          if not t[1] then return nil end
          local c, sp = string.match(t[1], '^%d+:([^:]+):(.+)$')
          return {member = t[1], release = tonumber(t[2]), cost = tonumber(c), spent = tonumber(sp)}
        end
        local x = newest()
        if cost ~= 0 then
          while x and x.release == nxt and x.cost == 0 do
            stored, given = min(om, stored + x.spent), given + 1
            redis.call('ZREM', set, x.member)
            x = newest()
          end
        end
        nxt, stored, given = nxt - cost, min(om, stored + spent), given + 1
        while x and x.release == nxt do
          nxt, stored, given = nxt - x.cost, min(om, stored + x.spent), given + 1
          redis.call('ZREM', set, x.member)
          x = newest()
        end
        redis.call('ZREMRANGEBYSCORE', set, '(' .. fmt(nxt), '+inf') -- after the tail: never the newest again
        given_any = true
      end
    end
    out[o + 1], out[o + 2], out[o + 3] = 2, given, kept
    o = o + 3
  end
end
out[o + 1] = nil

if granted or rescaled or given_any or kdirty then
  if kdirty then
    redis.call('HSET', key, 'k', k)
  end
  if shaped and not same then
    redis.call('HSET', key, 's', stored, 'n', nxt, 'm', max_text, 'c', cool_text)
  else
    redis.call('HSET', key, 's', stored, 'n', nxt)
  end
  if granted or rescaled then
    -- Expire when the bucket would be full anyway: a missing key then means the same thing.
    redis.call('PEXPIRE', key, floor(((nxt - now) + (om - stored) * oc) / 1000) + 1000)
  end
end
return out
)LUA";

// KEYS: the request's bucket keys (ARGV[1] of them), then each one's set of abandoned slots (same
// order), then its maxShare key if it has one.
// ARGV: number of bucket keys, now_us ("" = Redis TIME, as in kAcquire), the most abandoned slots
// kept per bucket, then release, cost, spent per bucket, then the share member.
// Per bucket, limiter::abandon line for line: give the reservation back if it is the newest, with
// every abandoned one then at the tail; else remember it in the bucket's set (score: release;
// member: "<1 if it took no time, else 0><sequence, 15 digits>:<cost>:<spent>", so that members of
// one release sort as the in-process store orders them). Drops the caller's waiting grant from its
// maxShare set. Returns per bucket {reservations given back, 1 if remembered else 0}.
inline constexpr const char* kRefund = R"LUA(
local function fmt(x) return string.format('%.17g', x) end
local nb = tonumber(ARGV[1])
local now
if ARGV[2] ~= '' then
  now = tonumber(ARGV[2])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local cap = tonumber(ARGV[3])
local out = {}
for i = 1, nb do
  local key, set = KEYS[i], KEYS[nb + i]
  local base = 4 + (i - 1) * 3
  local release, cost, spent = tonumber(ARGV[base]), tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2])
  local given, kept = 0, 0
  -- 'k' numbers the slots remembered for this state: a state without it (missing, or created anew
  -- since) holds none of the reservations a leftover set would name.
  local h = redis.call('HMGET', key, 's', 'n', 'm', 'k', 'f')
  if not h[4] then redis.call('DEL', set) end
  if h[1] then
    local stored, nxt, max = tonumber(h[1]), tonumber(h[2]), tonumber(h[3])
    redis.call('ZREMRANGEBYSCORE', set, '-inf', fmt(now)) -- released slots are not refundable
    if release > now and release < nxt then
      local seq = redis.call('HINCRBY', key, 'k', 1)
      local flag = '0'
      if cost == 0 then flag = '1' end
      local member = flag .. string.format('%015d', seq) .. ':' .. fmt(cost) .. ':' .. fmt(spent)
      redis.call('ZADD', set, fmt(release), member)
      kept = 1
      if redis.call('ZCARD', set) > cap then -- full: forget the earliest (possibly this one)
        redis.call('ZREMRANGEBYRANK', set, 0, 0)
        if not redis.call('ZSCORE', set, member) then kept = 0 end
      end
      local top = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')
      if top[2] then redis.call('PEXPIRE', set, math.floor((tonumber(top[2]) - now) / 1000) + 1000) end
    elseif release > now and release == nxt then
      local function give(c, s)
        nxt = nxt - c
        stored = math.min(max, stored + s)
        given = given + 1
      end
      local function newest()
        local t = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')
        if not t[1] then return nil end
        local c, s = string.match(t[1], '^%d+:([^:]+):(.+)$')
        return {member = t[1], release = tonumber(t[2]), cost = tonumber(c), spent = tonumber(s)}
      end
      local x = newest()
      if cost ~= 0 then
        while x and x.release == nxt and x.cost == 0 do
          give(0, x.spent)
          redis.call('ZREM', set, x.member)
          x = newest()
        end
      end
      give(cost, spent)
      while x and x.release == nxt do
        give(x.cost, x.spent)
        redis.call('ZREM', set, x.member)
        x = newest()
      end
      redis.call('ZREMRANGEBYSCORE', set, '(' .. fmt(nxt), '+inf') -- after the tail: never the newest again
      -- An adaptive bucket's pause (kAdapt's 'f'): what comes back never reopens it early.
      local pause = tonumber(h[5])
      if pause and pause > now and nxt < pause then
        nxt = pause
        stored = 0
      end
      redis.call('HSET', key, 's', fmt(stored), 'n', fmt(nxt))
    end
  end
  table.insert(out, given)
  table.insert(out, kept)
end
if #KEYS > 2 * nb then redis.call('ZREM', KEYS[2 * nb + 1], ARGV[4 + nb * 3]) end
return out
)LUA";

// A throttle signal for an adaptive bucket (issue 17): limiter::on_throttle on the hash kAcquire
// keeps, at Redis time, so that every gateway of the fleet cuts and pauses the same bucket once per
// episode. With `on`, a pause also empties the bucket until it ends (as LocalStore::adapt), and
// is kept in its hash ('f') so that a refund cannot bring a slot back inside it (kRefund).
// KEYS[1] the bucket, KEYS[2] its adaptive hash. ARGV[1] now_us ('' = Redis TIME), ARGV[2] 1 on,
// 2 shadow, ARGV[3] the configured rate, ARGV[4] its burst ('' unset), ARGV[5] pause_us, ARGV[6] jitter_us.
// Returns {cut (0/1), from, to, paused (0/1), pause_until, pause left, effective rate}.
inline constexpr const char* kAdaptBody = R"LUA(
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local on, conf, burst = ARGV[2] == '1', tonumber(ARGV[3]), ARGV[4]
local pause_us, jitter_us = tonumber(ARGV[5]), tonumber(ARGV[6])
local fmt = function(x) return string.format('%.17g', x) end
local A = adaptive_lib()
local st = A.load(KEYS[2])
local eff = A.effective(st, conf, now)
local cut, from, to, paused = 0, 0, 0, 0
if not (now - st.signal < A.DEBOUNCE) then
  st.signal = now
  local sent = eff
  local d = A.demand(st, now)
  if d < sent then sent = d end
  local measured = A.sent(st, now)
  if measured < sent then
    if measured > A.BETA * sent then sent = measured else sent = A.BETA * sent end
  end
  local fl = A.floor(conf)
  if sent < fl then sent = fl end
  if pause_us > 0 then
    if pause_us > A.MAX_PAUSE then pause_us = A.MAX_PAUSE end
    if jitter_us < 0 then jitter_us = 0 end
    local untl = now + pause_us + jitter_us
    if untl > st.pause then
      st.pause = untl
      paused = 1
    end
  end
  st.wmax = sent
  if st.pause > now then st.epoch = st.pause else st.epoch = now end
  st.last = now
  cut, from = 1, sent
  to = A.effective(st, conf, now)
  eff = to
  if on and paused == 1 then
    local h = redis.call('HMGET', KEYS[1], 's', 'n', 'm', 'c')
    local n, mx, cool = st.pause, nil, nil
    if h[1] then
      if tonumber(h[2]) > n then n = tonumber(h[2]) end
      mx, cool = h[3], h[4]
    else
      local interval = 1e6 / conf
      local m = conf
      if burst ~= '' then m = tonumber(burst) end
      mx, cool = fmt(m), fmt(interval)
    end
    redis.call('HSET', KEYS[1], 's', '0', 'n', fmt(n), 'm', mx, 'c', cool, 'f', st.pause)
    redis.call('PEXPIRE', KEYS[1], math.floor(((n - now) + tonumber(mx) * tonumber(cool)) / 1000) + 1000)
  end
end
A.save(KEYS[2], st)
local left = 0
if st.pause > now then left = st.pause - now end
return {cut, fmt(from), fmt(to), paused, st.pause, left, fmt(eff)}
)LUA";
inline const std::string kAdapt = std::string(kAdaptiveLua) + kAdaptBody;

// The admin API's read of buckets (no writes): Redis TIME once, then for each bucket its stored
// permits and next free slot ("" when the key is missing: a full, rested bucket) and how many
// abandoned slots are still ahead of now.
// KEYS: bucket1, abandoned1, bucket2, abandoned2, ...
// Returns {seconds, microseconds, then per bucket: s, n, abandoned ahead}.
inline constexpr const char* kInspect = R"LUA(
local t = redis.call('TIME')
local after = '(' .. t[1] .. string.format('%06d', tonumber(t[2]))
local out = {t[1], t[2]}
for i = 1, #KEYS, 2 do
  local h = redis.call('HMGET', KEYS[i], 's', 'n')
  out[#out + 1] = h[1] or ''
  out[#out + 1] = h[2] or ''
  out[#out + 1] = redis.call('ZCOUNT', KEYS[i + 1], after, '+inf')
end
return out
)LUA";

// One step of counting keys that match a pattern: SCAN on the server, so that only the cursor and
// the count cross the wire. ARGV: cursor, pattern. Returns {next cursor, keys matched}.
inline constexpr const char* kScanCount = R"LUA(
local r = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', 1000)
return {r[1], #r[2]}
)LUA";

}  // namespace tollgate::store::scripts
