-- The minimal token bucket a Redis limiter needs, the reference for what a decision costs Redis
-- (bench/instructions.sh RM, bench/redis_script_cost.sh RM): clock, read the state, refill and take
-- one, write it back, expire it when it would be full again. No rule changes, warm-up or quotas.
-- KEYS[1] the bucket; ARGV[1] rate per second, ARGV[2] capacity.
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local rate, cap = tonumber(ARGV[1]), tonumber(ARGV[2])
local h = redis.call("HMGET", KEYS[1], "tokens", "ts")
local tokens, ts = tonumber(h[1]) or cap, tonumber(h[2]) or now
tokens = math.min(cap, tokens + (now - ts) * rate / 1000000)
local ok = 0
if tokens >= 1 then tokens = tokens - 1; ok = 1 end
redis.call("HSET", KEYS[1], "tokens", tostring(tokens), "ts", tostring(now))
redis.call("PEXPIRE", KEYS[1], math.ceil((cap - tokens) / rate * 1000) + 1000)
return ok
