-- doc: last_cut.lua, an adaptive bucket's last cut as the fleet made it: read by a gateway whose
-- request was held on a slot granted before a cut it has not heard of (another gateway's: a
-- gateway hears of those only with its next decision for the bucket), so that it asks again
-- instead of sending into a supplier that has just refused. Loadable alone; no writes.
--
-- KEYS[1] the bucket's adaptive hash (adaptive_lib.lua's). Returns the last cut's time on Redis's
-- clock in microseconds, as acquire.lua and adapt.lua report it (0: none).
--
-- Example (add -h/-p; "dbg:" is a scratch key prefix, see acquire.lua):
--   redis-cli --eval last_cut.lua 'dbg:{/orders}r:/orders'
--
-- (This header, every line down to the first that is not a "--" comment, is not sent to Redis:
-- the build drops it, cmake/embed_lua.cmake. The rest of the file is sent byte for byte, and
-- editing it changes the script's SHA1.)

local g = tonumber(redis.call('HGET', KEYS[1], 'g'))
if g == nil or g < 0 then return 0 end
return g
