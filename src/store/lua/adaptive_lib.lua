-- doc: adaptive_lib.lua, a fragment: the adaptive rate's functions, made by adaptive_lib(); it
-- runs nothing itself. The store sends it in front of acquire.lua (the general acquire script)
-- and of adapt.lua (a throttle signal), which call adaptive_lib(). To load either by hand,
-- concatenate them (in src/store/lua), then see that file for its KEYS, ARGV and an example:
--   cat adaptive_lib.lua acquire.lua > /tmp/acquire.lua
--   cat adaptive_lib.lua adapt.lua > /tmp/adapt.lua
--
-- src/limiter/adaptive_rate.cpp in Lua, the same operations in the same order. Everything is made
-- by one function because a script pays for each closure it creates on every call: the general
-- script makes them only for an adaptive bucket. The state is a hash beside the bucket's (same
-- hash tag, name "r:<bucket>"): w the held rate (target), e epoch, l last, g last_signal, p
-- pause_until, s the current second, c/q arrivals this second and the previous one, oc/op the
-- supplier's admissions reported (answers other than throttles), so those since the last cut, v
-- the level estimated at the last cut, h its hold; a1..a4 the callers of
-- arrivals (the most recent, when, the most recent other one, when), t1..t4 those of throttles;
-- xr, xl, xs, xq, xw, xg the supplier's advertised allowance (limiter::Advertised: reset, left,
-- seq, limit, window, granted), xa the grants counted ahead of its reset; ws, ww the fleet's arc of
-- where the supplier's windows start (limiter::WindowPhase::share, told by every gateway): once
-- learned, the seconds above are the supplier's windows, not Redis's whole seconds.
-- Caller ids are integers below 2^53, exact as Lua numbers. A missing hash is a rule that never
-- adapted.
--
-- (This header, every line down to the first that is not a "--" comment, is not sent to Redis:
-- the build drops it, cmake/embed_lua.cmake. The rest of the file is sent byte for byte, and
-- editing it changes the script's SHA1.)

local function adaptive_lib()
  local A_MARGIN, A_MAX_CUT, A_PROBE, A_GAIN, A_DEBOUNCE, A_EVIDENCE = 0.95, 0.5, 0.05, 1.25, 500000, 2000000
  local A_UNTURNED = 1000000
  local A_HOLD_MIN, A_HOLD_MAX, A_SAME, A_RECENT, A_DRAINED = 500000, 3000000, 0.25, 30000000, 1.2
  local A_MAX_PAUSE, A_FLOOR_SHARE, A_MIN_FLOOR, A_FORGET = 60000000, 0.02, 0.1, 600000000
  local A_PROBE_COST, A_HOLD_MOST, A_ADV_FORGET = 0.025, 10000000, 600000000
  local NEVER = -9007199254740992
  -- The seconds the counts are kept by: the supplier's windows once the fleet learned where they
  -- start (the middle of the arc ws, ww), else Redis's (the wall clock's); moved by less than half
  -- a second either way, so that a second keeps its number (limiter's second_shift).
  local function a_shift(ws, ww)
    if ww > 0 then return (500000 - ws - math.floor((ww + 1) / 2)) % 1000000 - 500000 end
    return 0
  end
  local function a_load(key)
    local h = redis.call('HMGET', key, 'w', 'e', 'l', 'g', 'p', 's', 'c', 'q', 'oc', 'op', 'so', 'v', 'h',
                         'a1', 'a2', 'a3', 'a4', 't1', 't2', 't3', 't4', 'xr', 'xl', 'xs', 'xq', 'xw', 'xg', 'xa',
                         'ws', 'ww')
    local ws, ww = tonumber(h[29]) or 0, tonumber(h[30]) or 0
    return {shift = a_shift(ws, ww), ws = ws, ww = ww,
            target = tonumber(h[1]) or 0, epoch = tonumber(h[2]) or 0, last = tonumber(h[3]) or 0,
            signal = tonumber(h[4]) or NEVER, pause = tonumber(h[5]) or 0, sec = tonumber(h[6]) or 0,
            dc = tonumber(h[7]) or 0, dp = tonumber(h[8]) or 0, oc = tonumber(h[9]) or 0, op = tonumber(h[10]) or 0,
            so = tonumber(h[11]) or 0, level = tonumber(h[12]) or 0, hold = tonumber(h[13]) or 0,
            a = {tonumber(h[14]) or 0, tonumber(h[15]) or NEVER, tonumber(h[16]) or 0, tonumber(h[17]) or NEVER},
            t = {tonumber(h[18]) or 0, tonumber(h[19]) or NEVER, tonumber(h[20]) or 0, tonumber(h[21]) or NEVER},
            xr = tonumber(h[22]) or 0, xl = tonumber(h[23]) or 0, xs = tonumber(h[24]) or 0,
            xq = tonumber(h[25]) or 0, xw = tonumber(h[26]) or 0, xg = tonumber(h[27]) or 0,
            xa = tonumber(h[28]) or 0}
  end
  local function a_save(key, st)
    local f = function(x) return string.format('%.17g', x) end
    redis.call('HSET', key, 'w', f(st.target), 'e', st.epoch, 'l', st.last, 'g', st.signal, 'p', st.pause,
               's', st.sec, 'c', f(st.dc), 'q', f(st.dp), 'oc', f(st.oc), 'op', f(st.op), 'so', f(st.so),
               'v', f(st.level), 'h', st.hold, 'a1', f(st.a[1]), 'a2', st.a[2], 'a3', f(st.a[3]), 'a4', st.a[4],
               't1', f(st.t[1]), 't2', st.t[2], 't3', f(st.t[3]), 't4', st.t[4],
               'xr', st.xr, 'xl', f(st.xl), 'xs', f(st.xs), 'xq', f(st.xq), 'xw', st.xw, 'xg', f(st.xg), 'xa', f(st.xa),
               'ws', st.ws, 'ww', st.ww)
    redis.call('PEXPIRE', key, A_FORGET / 1000)
  end
  local function a_pair(pair, caller, t)
    if caller ~= pair[1] then
      pair[3] = pair[1]
      pair[4] = pair[2]
      pair[1] = caller
    end
    pair[2] = t
  end
  local function a_floor(conf)
    local f = conf * A_FLOOR_SHARE
    if f < A_MIN_FLOOR then f = A_MIN_FLOOR end
    if f > conf then f = conf end
    return f
  end
  -- limiter's extend_pause: 1 when the pause was made longer, else 0.
  local function a_pause(st, now, pause_us, jitter_us)
    if not (pause_us > 0) then return 0 end
    if pause_us > A_MAX_PAUSE then pause_us = A_MAX_PAUSE end
    if jitter_us < 0 then jitter_us = 0 end
    local untl = now + pause_us + jitter_us
    if untl > st.pause then
      st.pause = untl
      return 1
    end
    return 0
  end
  local function a_second(st, t) return math.floor((t + st.shift) / 1e6) end
  -- limiter::WindowPhase::share: a gateway's pair (its arc's start `ps` past now's point of the
  -- second, `pw` long; 0: none) merged into the fleet's arc (ws, ww), which then sets the seconds.
  local function a_share(st, now, ps, pw)
    if not (pw > 0 and pw < 1000000) then return end
    local from, ws, ww = (now + ps) % 1000000, st.ws, st.ww
    local merged = false
    if ww > 0 then
      local d = (from - ws) % 1000000
      if d < ww then
        ws, ww, merged = from, math.min(pw, ww - d), true
      else
        d = (ws - from) % 1000000
        if d < pw then ww, merged = math.min(ww, pw - d), true end
      end
    end
    if not merged then ws, ww = from, pw end
    st.ws, st.ww, st.shift = ws, ww, a_shift(ws, ww)
  end
  -- The fleet's arc told back relative to now (0 0: not learned), appended to a reply.
  local function a_told(st, now, out)
    local rs = 0
    if st.ww > 0 then rs = (st.ws - now) % 1000000 end
    table.insert(out, rs)
    table.insert(out, st.ww)
  end
  local function a_roll(st, t)
    local sec = a_second(st, t)
    if sec <= st.sec then return end
    if sec == st.sec + 1 then
      st.dp, st.op = st.dc, st.oc
    else
      st.dp, st.op = 0, 0
    end
    st.dc, st.oc = 0, 0
    st.sec = sec
  end
  local function a_sliding(st, cur, prev, t)
    local sec = a_second(st, t)
    local elapsed = t + st.shift - sec * 1000000
    local left = (1e6 - elapsed) / 1e6
    if sec <= st.sec then return prev * left + cur end
    if sec == st.sec + 1 then return cur * left end
    return 0
  end
  local function a_note(st, t, permits, caller)
    a_roll(st, t)
    st.dc = st.dc + permits
    a_pair(st.a, caller, t)
  end
  local function a_demand(st, t) return a_sliding(st, st.dc, st.dp, t) end
  local function a_ok(st, t, n, before)
    a_roll(st, t)
    st.oc = st.oc + (n - before)
    st.op = st.op + before
    st.so = st.so + n
  end
  local function a_per_window(st, t)
    local sec = a_second(st, t)
    if sec <= st.sec then
      if st.oc > st.op then return st.oc end
      return st.op
    end
    if sec == st.sec + 1 then return st.oc end
    return 0
  end
  local function a_curve(st, t)
    local x = (t - st.epoch) / 1e6
    if x < 0 then x = 0 end
    return st.target * (1 + A_PROBE * x * x * x)
  end
  local function a_effective(st, conf, t)
    if st.target > 0 and t - st.last > A_FORGET and st.pause <= t then st.target = 0 end
    if not (st.target > 0) then return conf end
    if t > st.last then
      local from = st.last
      if st.epoch > from then from = st.epoch end
      if t > from and a_demand(st, t) < a_curve(st, t) then st.epoch = st.epoch + (t - from) end
      st.last = t
    end
    local w = a_curve(st, t)
    if w >= conf then
      st.target = 0
      return conf
    end
    local rate = w
    local d = a_demand(st, t)
    if rate > d then rate = d end
    local fl = a_floor(conf)
    if rate < fl then rate = fl end
    return rate
  end
  -- The advertised allowance: src/limiter/advertised.cpp, the same steps in the same order.
  local function a_adv_roll(st, t)
    if st.xr == 0 or t < st.xr then return end
    if not (st.xq > 0) or st.xw <= 0 or t - st.xr >= A_ADV_FORGET then
      st.xr, st.xl, st.xs, st.xa = 0, 0, 0, 0
      return
    end
    local k = math.floor((t - st.xr) / st.xw) + 1
    if k == 1 then st.xs = st.xg - st.xa else st.xs = st.xg end
    st.xa = 0
    st.xl = st.xq
    st.xr = st.xr + k * st.xw
  end
  local function a_adv_note(st, t, r)
    if not (r.left >= 0) or r.reset_in < 0 then return end
    a_adv_roll(st, t)
    local seq = math.min(r.seq, st.xg)
    local reset = t + r.reset_in
    if st.xr ~= 0 then
      if seq < st.xs then return end
      local known = st.xl - (seq - st.xs)
      if r.left <= known and reset > st.xr then
        st.xl, st.xs = r.left, seq
        if r.limit > 0 then st.xq = r.limit end
        if r.window > 0 then st.xw = r.window end
        return
      end
    end
    if reset > st.xr then st.xa = 0 end
    st.xr, st.xl, st.xs, st.xq, st.xw = reset, r.left, seq, r.limit, r.window
  end
  -- Returns the pace (0: none) and the time the bucket is closed until (0: open).
  local function a_adv_limit(st, t, permits, from)
    a_adv_roll(st, t)
    if st.xr == 0 then return 0, 0 end
    local left = st.xl - (st.xg - st.xs - st.xa)
    if from < st.xr and left >= permits then return left / ((st.xr - from) / 1e6), 0 end
    if not (st.xq > 0) or st.xw <= 0 then return 0, st.xr end
    local rate = st.xq / (st.xw / 1e6)
    if st.xa + permits <= st.xq then return rate, st.xr end
    return rate, st.xr + st.xw
  end
  local function a_adv_granted(st, permits, slot)
    st.xg = st.xg + permits
    if st.xr ~= 0 and slot >= st.xr then st.xa = st.xa + permits end
  end
  return {load = a_load, save = a_save, note = a_note, demand = a_demand, effective = a_effective,
          adv_note = a_adv_note, adv_limit = a_adv_limit, adv_granted = a_adv_granted,
          ok = a_ok, per_window = a_per_window, second = a_second, pause = a_pause, share = a_share, told = a_told, pair = a_pair, floor = a_floor,
          MARGIN = A_MARGIN, MAX_CUT = A_MAX_CUT, UNTURNED = A_UNTURNED, GAIN = A_GAIN, DEBOUNCE = A_DEBOUNCE, EVIDENCE = A_EVIDENCE,
          HOLD_MIN = A_HOLD_MIN, HOLD_MAX = A_HOLD_MAX, SAME = A_SAME, RECENT = A_RECENT, MAX_PAUSE = A_MAX_PAUSE,
          DRAINED = A_DRAINED, PROBE_COST = A_PROBE_COST, HOLD_MOST = A_HOLD_MOST}
end
