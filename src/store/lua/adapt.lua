-- doc: adapt.lua, a throttle signal for an adaptive bucket's body: limiter::on_throttle on the
-- hash acquire.lua keeps, at Redis time, so that every gateway of the fleet cuts and pauses the
-- same bucket once per episode. Not loadable alone: the store sends adaptive_lib.lua in front of
-- it, so concatenate them (in src/store/lua) to load it by hand:
--   cat adaptive_lib.lua adapt.lua > /tmp/adapt.lua
--
-- KEYS[1] the bucket, KEYS[2] its adaptive hash. ARGV[1] now_us ('' = Redis TIME), ARGV[2] 1 on,
-- 2 shadow, ARGV[3] the configured rate, ARGV[4] its burst ('' unset), ARGV[5] pause_us, ARGV[6] jitter_us,
-- ARGV[7] the throttled request's caller id (an integer below 2^53), ARGV[8] the supplier's admissions this
-- gateway heard since its last decision for the bucket (counted first, as acquire.lua does), ARGV[9] how
-- many of them it heard before the current second, ARGV[10] and ARGV[11] the pair of a refusal and
-- the admission after it that the gateway learned since its last throttle, as the start of its arc
-- relative to now (0 to 999999) and its width (0: none).
-- Returns {cut (0/1), from, to, paused (0/1), pause_until, pause left, effective rate, unconfirmed (0/1),
-- the last cut's time (0: none), the fleet's arc of where the supplier's windows start: its start
-- relative to now, its width (0: not learned)}.
--
-- Example (add -h/-p; "dbg:" is a scratch key prefix, see acquire.lua): a throttle signal with a
-- pause of 2 s for a bucket of 10/s, adaptive on, no burst:
--   redis-cli --eval /tmp/adapt.lua 'dbg:{/orders}' 'dbg:{/orders}r:/orders' , '' 1 10 '' 2000000 0 7 0 0 0 0
--
-- With "on", a cut restarts the bucket's schedule (as LocalStore::adapt): empty, from the end of
-- the pause or from now; the slots granted before it are void. The restart is kept in its hash
-- ('f') so that a refund cannot bring a slot back before it (refund.lua).
--
-- (This header, every line down to the first that is not a "--" comment, is not sent to Redis:
-- the build drops it, cmake/embed_lua.cmake. The rest of the file is sent byte for byte, and
-- editing it changes the script's SHA1.)

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local on, conf, burst = ARGV[2] == '1', tonumber(ARGV[3]), ARGV[4]
local pause_us, jitter_us, caller = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local fmt = function(x) return string.format('%.17g', x) end
local A = adaptive_lib()
local st = A.load(KEYS[2])
local admitted, admitted_before = tonumber(ARGV[8]) or 0, tonumber(ARGV[9]) or 0
if admitted > 0 then A.ok(st, now, admitted, admitted_before) end
local eff = A.effective(st, conf, now)
A.pair(st.t, caller, now)
local cut, from, to, paused, unconfirmed = 0, 0, 0, 0, 0
local two = now - st.t[4] < A.EVIDENCE
local alone = st.a[1] == caller and not (now - st.a[4] < A.EVIDENCE)
if now - st.signal < A.DEBOUNCE then
  -- the same episode as the last cut
elseif not two and not alone then
  unconfirmed = 1
elseif st.so == 0 and now - st.signal < A.UNTURNED then
  -- refused again before the window that refused turned, nothing admitted since: a pause again, no cut
  paused = A.pause(st, now, pause_us, jitter_us)
else
  local previous = st.signal
  st.signal = now
  local sent = eff
  local d = A.demand(st, now)
  if d < sent then sent = d end
  local estimate = A.per_window(st, now)
  local cut_from = sent
  local recent = now - previous < A.RECENT
  if recent then
    local probing = sent > st.level
    local start = previous
    if st.pause - 1000000 > start and st.pause < now then start = st.pause - 1000000 end
    local elapsed = (now - start) / 1e6
    if probing then
      local above = st.so - st.level * elapsed
      if above > st.level then
        if estimate < st.level then estimate = st.level end
      else
        local most = st.level * A.GAIN
        if estimate > most then estimate = most end
        if st.level > 0 then cut_from = estimate end
        local since = st.so / elapsed
        local busy = since >= (1 - A.SAME) * st.level
        local paused_to = st.pause
        if paused_to > now then paused_to = now end
        local paused_us = 0
        if paused_to > start then paused_us = paused_to - start end
        local sending = (now - start - paused_us) / 1e6
        if busy and sending > 0 and estimate > st.so / sending * A.DRAINED then estimate = since end
        local least = st.level
        if busy and since < st.level then least = since end
        if estimate < least then estimate = least end
      end
    elseif now - start >= A.DEBOUNCE then
      local since = st.so / elapsed
      local window = 0
      if A.second(st, now) == st.sec then window = st.oc end
      if window > since then since = window end
      if since < estimate then estimate = since end
    end
  end
  st.so = 0
  if estimate > sent then estimate = sent end
  local lowest = A.MAX_CUT * cut_from
  if estimate < lowest then estimate = lowest end
  local hold = A.HOLD_MIN
  if st.level > 0 and recent and math.abs(estimate - st.level) <= A.SAME * st.level then
    hold = st.hold * 2
    if hold < A.HOLD_MIN then hold = A.HOLD_MIN end
    if estimate > st.level then
      estimate = (estimate + st.level) / 2
      if estimate > sent then estimate = sent end
      if estimate < lowest then estimate = lowest end
    end
    local most = A.HOLD_MAX
    if estimate > 0 then
      local spaced = 1e6 / (A.PROBE_COST * estimate) - 1e6
      if spaced > A.HOLD_MOST then
        if A.HOLD_MOST > most then most = A.HOLD_MOST end
      elseif spaced > most then
        most = math.floor(spaced)
      end
    end
    if hold > most then hold = most end
  end
  local target = A.MARGIN * estimate
  local fl = A.floor(conf)
  if target < fl then target = fl end
  st.level = estimate
  st.hold = hold
  paused = A.pause(st, now, pause_us, jitter_us)
  st.target = target
  if st.pause > now then st.epoch = st.pause + hold else st.epoch = now + hold end
  st.last = now
  cut, from = 1, sent
  to = A.effective(st, conf, now)
  eff = to
  if on then
    -- The schedule restarts at the new rate, empty, when the pause ends (or now): the slots granted
    -- before the cut are void, and a refund never reopens the bucket before the restart ('f').
    local h = redis.call('HMGET', KEYS[1], 's', 'n', 'm', 'c')
    local n, mx, cool = now, nil, nil
    if st.pause > now then n = st.pause end
    if h[1] then
      mx, cool = h[3], h[4]
    else
      local interval = 1e6 / conf
      local m = conf
      if burst ~= '' then m = tonumber(burst) end
      mx, cool = fmt(m), fmt(interval)
    end
    redis.call('HDEL', KEYS[1], 'k') -- the slots of left callers, remembered for refunds: void too (refund.lua)
    redis.call('HSET', KEYS[1], 's', '0', 'n', fmt(n), 'm', mx, 'c', cool, 'f', n)
    redis.call('PEXPIRE', KEYS[1], math.floor(((n - now) + tonumber(mx) * tonumber(cool)) / 1000) + 1000)
  end
end
-- Where the supplier's windows start: the pair this gateway told merged into the fleet's arc
-- (after the signal was read by the seconds it came in, as LocalStore::adapt), told back.
A.share(st, now, tonumber(ARGV[10]) or 0, tonumber(ARGV[11]) or 0)
A.save(KEYS[2], st)
local left = 0
if st.pause > now then left = st.pause - now end
local last_cut = 0
if st.signal > 0 then last_cut = st.signal end
local out = {cut, fmt(from), fmt(to), paused, st.pause, left, fmt(eff), unconfirmed, last_cut}
A.told(st, now, out)
return out
