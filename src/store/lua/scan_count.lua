-- doc: scan_count.lua, one step of counting the keys that match a pattern: SCAN on the server, so
-- that only the cursor and the count cross the wire. Loadable alone.
--
-- KEYS: none. ARGV: cursor, pattern. Returns {next cursor, keys matched}; call again with the next
-- cursor until it is 0.
--
-- Example (add -h/-p): the first step of counting the per-client keys under the prefix "tollgate:"
-- (include/tollgate/store/key_schema.hpp's client_keys_pattern):
--   redis-cli --eval scan_count.lua , 0 'tollgate:{*}[cqs]:*:?*'
--
-- (This header, every line down to the first that is not a "--" comment, is not sent to Redis:
-- the build drops it, cmake/embed_lua.cmake. The rest of the file is sent byte for byte, and
-- editing it changes the script's SHA1.)

local r = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', 1000)
return {r[1], #r[2]}
