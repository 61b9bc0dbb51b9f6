-- doc: acquire_lean.lua, the lean acquire script, for the common case: one bucket, no channel
-- bucket, no quotas, no maxShare, not adaptive; one decision or a batch of them on the same bucket
-- (the decisions that arrived while the previous call for the bucket was in flight), and the
-- refunds of lean requests. Loadable alone.
--
-- KEYS[1] the bucket, KEYS[2] its set of abandoned slots (touched only by refunds).
-- ARGV[1] now_us ('' = Redis TIME, as in acquire.lua), ARGV[2] flags: 1 pay_later, + 2 with warm-up,
-- + 4 with refunds, ARGV[3] interval_us, ARGV[4] max_permits, with warm-up ARGV[5] cool_down_us,
-- ARGV[6] threshold, ARGV[7] slope (without it cool_down = interval), with refunds then the most
-- abandoned slots kept; then per entry, in arrival order: a decision (permits, timeout_us) or a
-- refund ('r', release_us, cost_us, spent).
-- Returns per entry, in order: {1, wait_us, release_us, cost_us, remaining, spent} for a grant,
-- {0, retry_after_us, remaining} for a rejection (remaining and spent: integers when whole, else
-- %.17g strings), {2, reservations given back, 1 if remembered else 0} for a refund.
--
-- Examples (add -h/-p; "dbg:" is a scratch key prefix, see acquire.lua). Two decisions of one
-- permit each, waiting up to 250 ms, on a bucket of 10/s with a burst of 10:
--   redis-cli --eval acquire_lean.lua 'dbg:{/orders}' , '' 0 100000 10 1 250000 1 250000
-- A decision, then a refund of an earlier grant (RELEASE_US, COST_US, SPENT: that grant's
-- release_us, cost_us and spent), keeping at most 16 abandoned slots:
--   redis-cli --eval acquire_lean.lua 'dbg:{/orders}' 'dbg:{/orders}a:/orders' , \
--     '' 4 100000 10 16 1 250000 r RELEASE_US COST_US SPENT
--
-- The same arithmetic as acquire.lua on the same hash (fields s, n, m, c, so that every script
-- reads what another wrote), with nothing else: one HMGET, the decisions in arrival order at one
-- Redis TIME on the state in memory, then at most one HSET and one PEXPIRE; no write when nothing
-- was granted unless the rule changed (the rescaled state is kept, as the in-process store keeps
-- it). A script runs atomically, so a batch decides exactly as separate calls at that instant
-- would. Flat code: each call pays only for what it runs. What it costs Redis is mostly number
-- conversion, so it converts as little as it can:
--  - strings become numbers by arithmetic (x + 0: one strtod), not tonumber (two: it checks first);
--  - the shape is sent as %.17g text and stored as that text (m, c), so that an unchanged rule is
--    recognised by comparing strings; only if they differ are they compared as numbers;
--  - a whole remaining or spent count goes back as an integer, with no string.format.
-- Numbers handed to redis.call are written by Redis as %.17g, hence exactly (formatting them in
-- Lua instead, with '%d' where whole, measured no cheaper).
-- A refund gives the slot back in its place in the bucket's queue, exactly as refund.lua would in
-- a call of its own at that instant (the same abandoned set, member format and bound). The hash is
-- read once and written once; the set is touched only by refund entries. A rule edit is applied
-- at the batch's first decision, not before: a refund queued ahead of it sees the state it would
-- have seen alone.
--
-- (This header, every line down to the first that is not a "--" comment, is not sent to Redis:
-- the build drops it, cmake/embed_lua.cmake. The rest of the file is sent byte for byte, and
-- editing it changes the script's SHA1.)

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
