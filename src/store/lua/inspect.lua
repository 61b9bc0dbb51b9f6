-- doc: inspect.lua, the admin API's read of buckets (no writes): Redis TIME once, then for each
-- bucket its stored permits and next free slot ('' when the key is missing: a full, rested bucket)
-- and how many abandoned slots are still ahead of now. Loadable alone.
--
-- KEYS: bucket1, abandoned1, bucket2, abandoned2, ...   ARGV: none.
-- Returns {seconds, microseconds, then per bucket: s, n, abandoned ahead}.
--
-- Example (add -h/-p; "dbg:" is a scratch key prefix, see acquire.lua):
--   redis-cli --eval inspect.lua 'dbg:{/orders}' 'dbg:{/orders}a:/orders'
--
-- (This header, every line down to the first that is not a "--" comment, is not sent to Redis:
-- the build drops it, cmake/embed_lua.cmake. The rest of the file is sent byte for byte, and
-- editing it changes the script's SHA1.)

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
