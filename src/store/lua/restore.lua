-- doc: restore.lua, a granted request that reached no upstream (no endpoint could take it) gives
-- its permits back as stored permits (limiter::restore, per bucket of the request). Loadable alone.
--
-- KEYS: the request's bucket keys (its own, then its channel bucket's).
-- ARGV: now_us ('' = Redis TIME, as in acquire.lua), then the permits per bucket.
-- Returns per bucket 1 if permits came back, else 0.
--
-- Example (add -h/-p; "dbg:" is a scratch key prefix, see acquire.lua): give one permit back:
--   redis-cli --eval restore.lua 'dbg:{/orders}' , '' 1
--
-- Per bucket: stored = min(max, stored + permits) (acquire.lua's hash: 's' stored, 'm' max), not
-- while an adaptive pause ('f', adapt.lua) is on: what comes back never reopens it early. No
-- resync is needed: the permits credited later for the time since 'n' are capped at the same max.
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
local out = {}
for i = 1, #KEYS do
  local h = redis.call('HMGET', KEYS[i], 's', 'm', 'f')
  local given = 0
  if h[1] then
    local stored, max, pause = tonumber(h[1]), tonumber(h[2]), tonumber(h[3])
    if not (pause and pause > now) and stored < max then
      redis.call('HSET', KEYS[i], 's', string.format('%.17g', math.min(max, stored + tonumber(ARGV[1 + i]))))
      given = 1
    end
  end
  table.insert(out, given)
end
return out
