-- doc: acquire.lua, the general acquire script's body: one request's checks, all-or-nothing (up
-- to two buckets, window quotas, maxShare). Any request the lean script (acquire_lean.lua) does
-- not take comes here. Not loadable alone: the store sends adaptive_lib.lua in front of it, so
-- concatenate them (in src/store/lua) to load it by hand:
--   cat adaptive_lib.lua acquire.lua > /tmp/acquire.lua
--
-- KEYS: [bucket] [parent] quota1..quotaN [share]  (which are present: ARGV[5..8])
-- ARGV[1] permits (of the bucket: the rule's cost), ARGV[2] timeout_us, ARGV[3] mode (0 pay_now, 1 pay_later),
-- ARGV[4] now_us ('' = Redis TIME: the only clock in production; a value only for replays/tests),
-- ARGV[5] has bucket (0/1), ARGV[6] has parent (0/1), ARGV[7] number of quotas, ARGV[8] max held (0: no share),
-- ARGV[9] adaptive (0 off, 1 on, 2 shadow: then KEYS has the bucket's adaptive hash right after the bucket),
-- ARGV[10] the parent's permits (channelCost), ARGV[11] and ARGV[12] the shares of the bucket's and
-- the parent's burst the request leaves for classes above its own (priority classes; 0: none),
-- ARGV[13] a meter in place of the bucket (0 none, 1 srTCM, 2 trTCM: then KEYS ends with its hash
-- and ARGV with cir, cbs, ebs or pir, pbs or 0, the pre-colour (0 green, 1 yellow, 2 red) and 1 to
-- wait for a green; ARGV[1] is its cost),
-- then 7 numbers per present bucket: interval, max_permits, cool_down, warm (0/1), threshold, cold_interval, slope,
-- and after the bucket's, when adaptive, its configured rate, burst ('' unset), the request's caller id,
-- the supplier's admissions this gateway reports, 1 when the request asks again (not a new arrival),
-- how many of those admissions it heard before the current second (they count in the previous one),
-- and the supplier's advertised allowance it reports (limiter::AdvertReport: seq, left, reset_in_us,
-- limit, window_us; all five '' for none), and the pair of where the supplier's windows start it
-- learned since its last report (limiter::WindowPhase::share: the arc's start relative to now,
-- its width; 0 0 for none),
-- then 3 per quota: period_us, limit, algorithm (0 fixed, 1 sliding).
-- Returns {granted, wait_us, retry_after_us, remaining, max_permits, bound (0 bucket, 1 parent, 2 share, 3 quota),
--          bound_quota (rejected) or the maxShare grant's release (granted), release1, cost1, spent1, release2, cost2, spent2,
--          then per quota: admitted, used, remaining, retry_after_us, reset_us,
--          then when adaptive: effective rate, pause left (us), the last cut's time (us, 0: none), the
--          bucket's count of granted permits (after this grant, if granted), the fleet's arc of where
--          the supplier's windows start (its start relative to now, its width; 0 0: not learned),
--          then with a meter: its colour (0 green, 1 yellow, 2 red), C and E (srTCM) or P (trTCM) after it}
--          (doubles as strings).
--
-- Examples (add -h/-p; "dbg:" is a scratch key prefix, the gateway's keys are
-- <key_prefix>{<bucket>}..., see include/tollgate/store/key_schema.hpp). One permit, waiting up to
-- 250 ms, from a bucket of 10/s with a burst of 10 (interval 100000 us, max 10, cool_down 100000):
--   redis-cli --eval /tmp/acquire.lua 'dbg:{/orders}' , 1 250000 0 '' 1 0 0 0 0 1 0 0 0 100000 10 100000 0 0 0 0
-- The same bucket adaptive (on), its configured rate 10 and no burst, with its adaptive hash:
--   redis-cli --eval /tmp/acquire.lua 'dbg:{/orders}' 'dbg:{/orders}r:/orders' , \
--     1 250000 0 '' 1 0 0 0 1 1 0 0 0 100000 10 100000 0 0 0 0 10 '' 7 0 0 0 '' '' '' '' ''
-- The same bucket with a fixed window quota of 100 a minute:
--   redis-cli --eval /tmp/acquire.lua 'dbg:{/orders}' 'dbg:{/orders}q:7:' , \
--     1 250000 0 '' 1 0 1 0 0 1 0 0 0 100000 10 100000 0 0 0 0 60000000 100 0
--
-- The bucket arithmetic is src/limiter/token_bucket.cpp's, the same operations in the same order,
-- and the quotas' src/limiter/window.cpp's, so that both stores compute the same doubles and
-- truncate them the same way (tests/integration/redis_store_test.cpp replays one sequence against
-- both). Numbers come in as %.17g strings or as the shortest text of the same double, which
-- tonumber reads back exactly; Redis writes a Lua number handed to redis.call as %.17g.
--
-- (This header, every line down to the first that is not a "--" comment, is not sent to Redis:
-- the build drops it, cmake/embed_lua.cmake. The rest of the file is sent byte for byte, and
-- editing it changes the script's SHA1.)

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
local permits_b, share_a, share_b = tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])
local meter_kind = tonumber(ARGV[13])

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
-- `reserve`: the permits left for classes above the request's (limiter::try_acquire's).
local function decide(st0, sh, permits, reserve)
  local st = {stored = st0.stored, next = st0.next}
  resync(st, sh.max, sh.cool)
  local spend = math.min(permits, st.stored)
  local fresh = permits - spend
  local cost = sat_add(stored_cost(sh, st.stored, spend), trunc(fresh * sh.interval))
  local release = sat_add(st.next, cost)
  local ready = release
  if pay_later then ready = st.next end
  if reserve > 0 then
    local needed = permits + reserve
    local vspend = math.min(needed, st.stored)
    local vfresh = needed - vspend
    if pay_later then ready = sat_add(st.next, trunc(math.max(0, reserve - st.stored) * sh.interval))
    else ready = sat_add(st.next, trunc(vfresh * sh.interval)) end
  end
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

-- Three-colour meters: src/limiter/three_color.cpp, the same operations in the same order (each
-- step one double operation), and its search for the first whole microsecond an answer changes.
local MAXS = SAT -- searches stop at 2^53; "never" is sent as 2^53 (the codec reads it as infinite)
local function first_micros(reached, guess)
  local g
  if not (guess < MAXS) then g = MAXS elseif guess < 1.0 then g = 1 else g = math.ceil(guess) end
  local lo, hi
  if reached(g) then
    hi = g
    local step = 1
    while true do
      if hi - step <= 0 then lo = 0; break end
      local cand = hi - step
      if not reached(cand) then lo = cand; break end
      hi = cand
      step = step * 2
    end
  else
    lo = g
    local step = 1
    while true do
      if lo >= MAXS - step then
        if not reached(MAXS) then return MAXS end
        hi = MAXS
        break
      end
      local cand = lo + step
      if reached(cand) then hi = cand; break end
      lo = cand
      step = step * 2
    end
  end
  while hi - lo > 1 do
    local mid = lo + math.floor((hi - lo) / 2)
    if reached(mid) then hi = mid else lo = mid end
  end
  return hi
end
local function from_now(last, dt)
  if dt >= MAXS then return MAXS end
  local gap = 0
  if last > now then gap = last - now end
  return gap + dt
end
-- m: {two, cir, cbs, x (ebs or pir), pbs}; st: {c, e (E or P), last}
local function refill(st, m, dt)
  if m.two then
    local elapsed = dt
    local p_scaled = m.x * elapsed
    local p_added = p_scaled / 1e6
    st.e = math.min(m.pbs, st.e + p_added)
    local c_scaled = m.cir * elapsed
    local c_added = c_scaled / 1e6
    st.c = math.min(m.cbs, st.c + c_added)
  else
    local scaled = m.cir * dt
    local added = scaled / 1e6
    local sum = st.c + added
    if sum <= m.cbs then
      st.c = sum
    else
      local overflow = sum - m.cbs
      st.c = m.cbs
      st.e = math.min(m.x, st.e + overflow)
    end
  end
end
local function m_update(st, m)
  if now <= st.last then return end
  refill(st, m, now - st.last)
  st.last = now
end
local function m_color(st, m, cost, pre)
  if m.two then
    if pre == 2 or st.e < cost then return 2 end
    if pre == 1 or st.c < cost then return 1 end
    return 0
  end
  if pre == 2 then return 2 end
  if pre == 0 and st.c >= cost then return 0 end
  if st.e >= cost then return 1 end
  return 2
end
local function m_copy(st) return {c = st.c, e = st.e, last = st.last} end
local function m_retry(st, m, cost, pre)
  if pre == 2 then return MAXS end
  local guess
  if m.two then
    if cost > m.pbs then return MAXS end
    guess = (cost - st.e) * 1e6 / m.x
  else
    local can = false
    guess = MAXS
    if pre == 0 and cost <= m.cbs then
      can = true
      guess = math.min(guess, (cost - st.c) * 1e6 / m.cir)
    end
    if cost <= m.x then
      can = true
      guess = math.min(guess, (cost - st.e + m.cbs - st.c) * 1e6 / m.cir)
    end
    if not can then return MAXS end
  end
  local function not_red(dt)
    local nx = m_copy(st)
    refill(nx, m, dt)
    return m_color(nx, m, cost, pre) ~= 2
  end
  return from_now(st.last, first_micros(not_red, guess))
end
-- Updates st to now and marks a request of `cost`: {color, wait, retry, c, e}; st is charged.
local function m_mark(st, m, cost, pre, wait_green, timeout)
  m_update(st, m)
  if wait_green and pre == 0 then
    local short, fits = st.c < cost, cost <= m.cbs
    if m.two then short, fits = (st.c < cost or st.e < cost), (cost <= m.cbs and cost <= m.pbs) end
    if short and fits then
      local guess = (cost - st.c) * 1e6 / m.cir
      if m.two then guess = math.max(guess, (cost - st.e) * 1e6 / m.x) end
      local function green(dt)
        local nx = m_copy(st)
        refill(nx, m, dt)
        if m.two then return nx.e >= cost and nx.c >= cost end
        return nx.c >= cost
      end
      local wait = from_now(st.last, first_micros(green, guess))
      if wait < MAXS and wait <= math.max(0, timeout) then
        if m.two then st.e = st.e - cost end
        st.c = st.c - cost
        return {color = 0, wait = wait, retry = 0, c = st.c, e = st.e}
      end
    end
  end
  local color = m_color(st, m, cost, pre)
  local retry = 0
  if color == 0 then
    if m.two then st.e = st.e - cost end
    st.c = st.c - cost
  elseif color == 1 then
    st.e = st.e - cost
  else
    retry = m_retry(st, m, cost, pre)
  end
  return {color = color, wait = 0, retry = retry, c = st.c, e = st.e}
end

local function num(i) return tonumber(ARGV[i]) end
local ki, base = 1, 14
local ka, kb, sa, sb
if has_a then ka, sa, ki, base = KEYS[ki], shape(base), ki + 1, base + 7 end
-- Adaptive: the arrival counts as demand, and with `on` the bucket decides at the effective rate
-- (its shape made here from that rate, as limiter::effective_params and shape_of make it).
local A, ad, kad, eff, pause_left, last_cut, closed = nil, nil, nil, 0, 0, 0, 0
if has_a and adaptive > 0 then
  kad = KEYS[ki]
  local conf, burst, caller, oks = tonumber(ARGV[base]), ARGV[base + 1], tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3])
  local again, oks_before = ARGV[base + 4] == '1', tonumber(ARGV[base + 5]) or 0
  local adv
  if ARGV[base + 6] ~= '' then
    adv = {seq = num(base + 6), left = num(base + 7), reset_in = num(base + 8), limit = num(base + 9),
           window = num(base + 10)}
  end
  local pair_start, pair_width = tonumber(ARGV[base + 11]) or 0, tonumber(ARGV[base + 12]) or 0
  ki, base = ki + 1, base + 13
  A = adaptive_lib()
  ad = A.load(kad)
  A.share(ad, now, pair_start, pair_width)
  if oks > 0 then A.ok(ad, now, oks, oks_before) end
  if not again then A.note(ad, now, permits, caller) end
  if adv then A.adv_note(ad, now, adv) end
  eff = A.effective(ad, conf, now)
  local pace, from = 0, now
  if ad.xr ~= 0 then -- the bucket's first free slot: what is left is spread from there
    local nf = tonumber(redis.call('HGET', ka, 'n'))
    if nf and nf > now then from = nf end
  end
  pace, closed = A.adv_limit(ad, now, permits, from)
  if pace > 0 and pace < eff then eff = pace end
  if adaptive == 1 then
    local mx = eff
    if burst ~= '' then mx = tonumber(burst) * eff / conf end
    local interval = 1e6 / eff
    sa = {interval = interval, max = mx, cool = interval, warm = false, threshold = 0, cold = 0, slope = 0}
    if ad.pause > now then pause_left = ad.pause - now end
    if ad.signal > 0 then last_cut = ad.signal end
  end
end
if has_b then kb, sb, ki, base = KEYS[ki], shape(base), ki + 1, base + 7 end

local a0, b0, a, b
local bd = {granted = true, wait = 0, retry = 0, remaining = 0}
local bound, bound_quota, mx = 0, 0, 0
local r1, r2 = {0, 0, 0}, {0, 0, 0}
if has_a then
  a0 = load(ka, sa)
  if adaptive == 1 and closed > now then
    -- The advertised window is used up: nothing before the one with room (kept even if rejected).
    a0.stored = 0
    if a0.next < closed then a0.next = closed end
    a0.rescaled = true
  end
  a = decide(a0, sa, permits, share_a * sa.max)
end
if has_b then b0 = load(kb, sb); b = decide(b0, sb, permits_b, share_b * sb.max) end
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

-- A meter in place of the bucket: its arguments follow the quotas', its key the share's.
local mkey, mt, mst, md, meter_left
if meter_kind > 0 then
  local mb = base + 3 * nq
  mkey = KEYS[ki + nq + ((max_held > 0) and 1 or 0)]
  mt = {two = meter_kind == 2, cir = num(mb), cbs = num(mb + 1), x = num(mb + 2), pbs = num(mb + 3)}
  local pre, wait_green = num(mb + 4), ARGV[mb + 5] == '1'
  local h = redis.call('HMGET', mkey, 'C', 'E', 'L', 'k', 'i', 'b', 'x', 'p')
  local full_e = mt.x
  if mt.two then full_e = mt.pbs end
  if not h[1] or tonumber(h[4]) ~= meter_kind then
    mst = {c = mt.cbs, e = full_e, last = now} -- missing (or another kind): full
  else
    mst = {c = tonumber(h[1]), e = tonumber(h[2]), last = tonumber(h[3])}
    local old = {two = mt.two, cir = tonumber(h[5]), cbs = tonumber(h[6]), x = tonumber(h[7]), pbs = tonumber(h[8])}
    if old.cir ~= mt.cir or old.cbs ~= mt.cbs or old.x ~= mt.x or old.pbs ~= mt.pbs then
      -- The rule changed: updated at the old rates, then kept within the new sizes.
      m_update(mst, old)
      mst.c = math.min(mst.c, mt.cbs)
      mst.e = math.min(mst.e, full_e)
      mst.changed = true
    end
  end
  local saved = m_copy(mst)
  mst.saved = saved
  local probe = m_copy(mst)
  m_update(probe, mt)
  meter_left = probe.c
  md = m_mark(mst, mt, permits, pre, wait_green, timeout)
  if md.color == 2 then
    if all or md.retry > retry then bound, mx, retry = 0, mt.cbs, md.retry end
    all = false
  elseif bd.granted then
    if (not b) or md.wait >= bd.wait then bound, mx = 0, mt.cbs end
    bd.wait = math.max(bd.wait, md.wait)
    if b then bd.remaining = math.min(bd.remaining, md.c) else bd.remaining = md.c end
  end
end
local function save_meter(st)
  local full_e = mt.x
  if mt.two then full_e = mt.pbs end
  redis.call('HSET', mkey, 'C', fmt(st.c), 'E', fmt(st.e), 'L', fmt(st.last), 'k', meter_kind,
             'i', fmt(mt.cir), 'b', fmt(mt.cbs), 'x', fmt(mt.x), 'p', fmt(mt.pbs))
  -- Expire when the meter would be full anyway: a missing key then means the same thing.
  local secs
  if mt.two then secs = math.max((mt.pbs - st.e) / mt.x, (mt.cbs - st.c) / mt.cir)
  else secs = ((mt.cbs - st.c) + (full_e - st.e)) / mt.cir end
  local ms = math.floor(secs * 1000) + 1000 + math.max(0, math.floor((st.last - now) / 1000))
  if ms > 1e12 then ms = 1e12 end -- 31 years: a meter that slow is kept that long (and sent as digits)
  redis.call('PEXPIRE', mkey, string.format('%.0f', ms))
end
local function meter_tail(out)
  if not md then return end
  table.insert(out, md.color)
  table.insert(out, fmt(md.c))
  table.insert(out, fmt(md.e))
end

local n = 1 -- a quota counts requests, whatever their cost
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
  if mst and mst.changed then save_meter(mst.saved) end
  local remaining = bd.remaining
  if bd.granted then
    remaining = 0
    if a and b then remaining = math.min(a.synced, b.synced) elseif a then remaining = a.synced
    elseif b then remaining = b.synced end
  end
  if mt then
    if b then remaining = math.min(remaining, meter_left) else remaining = meter_left end
  end
  local out = {0, 0, retry, fmt(remaining), fmt(mx), bound, bound_quota, 0, 0, '0', 0, 0, '0'}
  for _, v in ipairs(qout) do table.insert(out, v) end
  if ad then
    A.save(kad, ad)
    table.insert(out, fmt(eff))
    table.insert(out, pause_left)
    table.insert(out, last_cut)
    table.insert(out, fmt(ad.xg))
    A.told(ad, now, out)
  end
  meter_tail(out)
  return out
end
if a then save(ka, a, sa) end
if b then save(kb, b, sb) end
if mst then save_meter(mst) end
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
  A.adv_granted(ad, permits, now + bd.wait)
  A.save(kad, ad)
  table.insert(out, fmt(eff))
  table.insert(out, pause_left)
  table.insert(out, last_cut)
  table.insert(out, fmt(ad.xg))
  A.told(ad, now, out)
end
meter_tail(out)
return out
