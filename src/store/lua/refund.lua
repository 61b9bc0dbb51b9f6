-- doc: refund.lua, a departed caller gives its reservation back (limiter::abandon line for line,
-- per bucket of the request), and its waiting grant leaves its maxShare set. Loadable alone.
--
-- KEYS: the request's bucket keys (ARGV[1] of them), then each one's set of abandoned slots (same
-- order), then its maxShare key if it has one.
-- ARGV: number of bucket keys, now_us ('' = Redis TIME, as in acquire.lua), the most abandoned
-- slots kept per bucket, then release, cost, spent per bucket, then the share member.
-- Returns per bucket {reservations given back, 1 if remembered else 0}.
--
-- Example (add -h/-p; "dbg:" is a scratch key prefix, see acquire.lua): give back a grant of one
-- permit (RELEASE_US, COST_US: the grant's release_us and cost_us), keeping at most 16 abandoned
-- slots:
--   redis-cli --eval refund.lua 'dbg:{/orders}' 'dbg:{/orders}a:/orders' , 1 '' 16 RELEASE_US COST_US 1
--
-- Per bucket: give the reservation back if it is the newest, with every abandoned one then at the
-- tail; else remember it in the bucket's set (score: release; member: "<1 if it took no time, else
-- 0><sequence, 15 digits>:<cost>:<spent>", so that members of one release sort as the in-process
-- store orders them).
--
-- (This header, every line down to the first that is not a "--" comment, is not sent to Redis:
-- the build drops it, cmake/embed_lua.cmake. The rest of the file is sent byte for byte, and
-- editing it changes the script's SHA1.)

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
