-- doc: shared_token.lua, a credential shared by a fleet of gateways (an upstream's OAuth2 token,
-- src/proxy/upstream_auth.cpp): one token in a hash, and a lease that lets one gateway at a time
-- ask the token endpoint for the next. Relative times only (PTTL, PX): the gateways' clocks never
-- enter. Loadable alone.
--
-- KEYS: the token's hash (fields t: the token, l: its lifetime in ms), the lease (a string: its
-- holder). Both carry the upstream's hash tag, so that they share a cluster slot.
-- ARGV[1] is the operation:
--   get, holder, lease_ms, before_ms, refused: the token, unless it is within before_ms (at most
--       half its lifetime) of its end or is `refused` (a supplier answered 401 to it: deleted, for
--       every gateway). When it is due or missing, the lease is taken if free, for lease_ms.
--       Returns {token or "", its ms left or 0, 1 if this caller now holds the lease else 0,
--       1 if the token is due or missing else 0, its lifetime in ms or 0}.
--   put, holder, token, ttl_ms: stores the token for ttl_ms, and frees the lease if the caller
--       holds it. Returns 1.
--   fail, holder, hold_ms: the caller's token request failed: its lease is kept hold_ms more,
--       so that the fleet's next request waits its turn (the token endpoint's own rate). Returns 1.
--
-- Example (add -h/-p): the token of upstream "ndc" under the prefix "tollgate:":
--   redis-cli --eval shared_token.lua 'tollgate:{auth:ndc}:token' 'tollgate:{auth:ndc}:lease' , get me 11000 60000 ''
--
-- (This header, every line down to the first that is not a "--" comment, is not sent to Redis:
-- the build drops it, cmake/embed_lua.cmake. The rest of the file is sent byte for byte, and
-- editing it changes the script's SHA1.)

local op = ARGV[1]
if op == 'get' then
  local t = redis.call('HGET', KEYS[1], 't')
  local ttl = redis.call('PTTL', KEYS[1])
  if t and ARGV[5] ~= '' and t == ARGV[5] then
    redis.call('DEL', KEYS[1])
    t = false
  end
  local life = 0
  if t then
    life = tonumber(redis.call('HGET', KEYS[1], 'l')) or 0
    local before = math.min(tonumber(ARGV[4]), math.floor(life / 2))
    if ttl > before then return {t, ttl, 0, 0, life} end
  else
    ttl = 0
  end
  local leased = 0
  if redis.call('SET', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[3]) then leased = 1 end
  return {t or '', ttl, leased, 1, life}
elseif op == 'put' then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 't', ARGV[3], 'l', ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  if redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) end
  return 1
elseif op == 'fail' then
  if redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('PEXPIRE', KEYS[2], ARGV[3]) end
  return 1
end
return redis.error_reply('shared_token.lua: unknown operation ' .. tostring(op))
