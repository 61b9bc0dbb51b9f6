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
-- hash tag, name "r:<bucket>"): w w_max, e epoch, l last, g last_signal, p pause_until, s demand
-- second, c this second's arrivals, q the previous second's, x the measured rate of grants, y when
-- it was measured. A missing hash is a rule that never adapted.
--
-- (This header, every line down to the first that is not a "--" comment, is not sent to Redis:
-- the build drops it, cmake/embed_lua.cmake. The rest of the file is sent byte for byte, and
-- editing it changes the script's SHA1.)

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
