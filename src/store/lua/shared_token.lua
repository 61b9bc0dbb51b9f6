-- doc: shared_token.lua, a credential shared by a fleet of gateways (an upstream's OAuth2 token,
-- src/proxy/upstream_auth.cpp): one hash holds the token and the lease that lets one gateway at a
-- time ask the token endpoint for the next. One key, so that a Redis Cluster serves every step
-- while its slot migrates (a script on two keys would get TRYAGAIN then). Times are Redis's own
-- (TIME, in ms): the gateways' clocks never enter. Loadable alone.
--
-- KEYS[1]: the hash. Fields: t the token, l its lifetime (ms), e when it expires; h the lease's
-- holder, u when the lease ends; f until when the last token request's failure stands.
-- ARGV[1] is the operation:
--   get, holder, lease_ms, before_ms, refused: the token, unless it is within before_ms (at most
--       half its lifetime) of its end or is `refused` (a supplier answered 401 to it: deleted, for
--       every gateway). When it is due or missing, the lease is taken for lease_ms if it is free
--       or already the caller's. Returns {token or "", its ms left or 0, 1 if the caller now
--       holds the lease else 0, 1 if the token is due or missing else 0, its lifetime in ms or 0,
--       the ms left of the last failure or 0}.
--   put, holder, token, ttl_ms, hold_ms: stores the token for ttl_ms, if the caller still holds
--       the lease (else nothing: returns 0); the lease is kept hold_ms more, so that the fleet's
--       next token request waits its turn (the token endpoint's own rate). Returns 1.
--   fail, holder, hold_ms: the caller's token request failed: if it holds the lease, the lease
--       is kept hold_ms more and the failure stands as long, for the others to see. Returns 1.
--
-- Example (add -h/-p): the token of upstream "ndc" under the prefix "tollgate:" (the tag's second
-- part is the credential's fingerprint):
--   redis-cli --eval shared_token.lua 'tollgate:{auth:ndc:0123456789abcdef}:token' , get me 11000 60000 ''
--
-- (This header, every line down to the first that is not a "--" comment, is not sent to Redis:
-- the build drops it, cmake/embed_lua.cmake. The rest of the file is sent byte for byte, and
-- editing it changes the script's SHA1.)

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local k = KEYS[1]
local v = redis.call('HMGET', k, 't', 'l', 'e', 'h', 'u', 'f')
local t, life, e, h, u, f = v[1], tonumber(v[2]) or 0, tonumber(v[3]) or 0, v[4], tonumber(v[5]) or 0, tonumber(v[6]) or 0
if t and e <= now then t = false end
local held = h and u > now
-- The key lives as long as the longest of what it holds.
local function keep(until_ms)
  local last = math.max(until_ms, t and e or 0, held and u or 0, f)
  if last > now then redis.call('PEXPIRE', k, last - now) end
end
local op = ARGV[1]
if op == 'get' then
  if t and ARGV[5] ~= '' and t == ARGV[5] then
    redis.call('HDEL', k, 't', 'l', 'e')
    t = false
  end
  if t then
    local before = math.min(tonumber(ARGV[4]), math.floor(life / 2))
    if e - now > before then return {t, e - now, 0, 0, life, 0} end
  end
  local leased = 0
  if not held or h == ARGV[2] then
    u = now + tonumber(ARGV[3])
    redis.call('HSET', k, 'h', ARGV[2], 'u', u)
    held = true
    leased = 1
    keep(u)
  end
  local failed = 0
  if f > now then failed = f - now end
  if t then return {t, e - now, leased, 1, life, failed} end
  return {'', 0, leased, 1, 0, failed}
elseif op == 'put' then
  if not held or h ~= ARGV[2] then return 0 end
  t, e, u = ARGV[3], now + tonumber(ARGV[4]), now + tonumber(ARGV[5])
  redis.call('HSET', k, 't', t, 'l', ARGV[4], 'e', e, 'u', u)
  redis.call('HDEL', k, 'f')
  f = 0
  keep(e)
  return 1
elseif op == 'fail' then
  if not held or h ~= ARGV[2] then return 0 end
  u = now + tonumber(ARGV[3])
  f = u
  redis.call('HSET', k, 'u', u, 'f', f)
  keep(u)
  return 1
end
return redis.error_reply('shared_token.lua: unknown operation ' .. tostring(op))
