-- Multi-window sliding-window limiter (package stages/ratelimit).
-- KEYS[i]: one sorted set per window.
-- ARGV[1]: request id (unique per request).
-- ARGV[3i-1], ARGV[3i], ARGV[3i+1]: window i size (µs), limit, key TTL (ms).
-- Returns {allowed (1|0), wait µs (0 when allowed), server time µs}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local nowstr = t[1] .. string.format('%06d', tonumber(t[2]))
local wait = 0
for i = 1, #KEYS do
  local size = tonumber(ARGV[3 * i - 1])
  local limit = tonumber(ARGV[3 * i])
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', string.format('%d', now - size))
  local count = redis.call('ZCARD', KEYS[i])
  if count >= limit then
    -- The member at rank count-limit must leave before there is room.
    local e = redis.call('ZRANGE', KEYS[i], count - limit, count - limit, 'WITHSCORES')
    local w = tonumber(e[2]) + size - now
    if w > wait then wait = w end
    if w <= 0 and wait == 0 then wait = 1 end
  end
end
if wait > 0 then
  return {0, wait, nowstr}
end
local member = nowstr .. ':' .. ARGV[1]
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], nowstr, member)
  redis.call('PEXPIRE', KEYS[i], ARGV[3 * i + 1])
end
return {1, 0, nowstr}
