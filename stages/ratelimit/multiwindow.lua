-- Multi-window sliding-window limiter (package stages/ratelimit).
-- KEYS[1..n]: one sorted set per window; KEYS[n+1]: the pair's guard hash.
-- ARGV[1]: request id (unique per request).
-- ARGV[2]: the guard id the caller last saw ('' when none).
-- ARGV[3]: the server time (µs) of the caller's last grant of this pair ('0' when none).
-- ARGV[4]: the hold after a detected loss (µs): the longest window.
-- ARGV[5]: the guard's TTL after a grant (ms).
-- ARGV[3i+3], ARGV[3i+4], ARGV[3i+5]: window i size (µs), limit, key TTL (ms).
-- Returns {allowed (1|0), wait µs (0 when allowed), server time µs, guard id, lost (1|0)}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local nowstr = t[1] .. string.format('%06d', tonumber(t[2]))
local nw = #KEYS - 1
local guard = KEYS[#KEYS]
local g = redis.call('HMGET', guard, 'id', 'last', 'hold')
local gid = g[1]
local glast = tonumber(g[2]) or 0
local ghold = tonumber(g[3]) or 0
local cid = ARGV[2]
local clast = tonumber(ARGV[3])
local hold = tonumber(ARGV[4])
local gttl = tonumber(ARGV[5])
if ghold > now then
  -- A hold is in force: every grant made before the loss must first leave
  -- the longest window.
  return {0, ghold - now, nowstr, gid or '', 0}
end
if clast > 0 and now - clast < hold and (not gid or gid ~= cid or glast < clast) then
  -- The caller granted within the longest window, but the guard that grant
  -- updated is gone, was replaced or is older: the server lost state
  -- (restart without persistence, the AOF's unsynced tail, eviction). Grants
  -- this server no longer knows about may still count: hold every grant of
  -- the pair for the longest window.
  ghold = now + hold
  redis.call('HSET', guard, 'id', ARGV[1], 'last', string.format('%d', glast), 'hold', string.format('%d', ghold))
  redis.call('PEXPIRE', guard, math.floor(hold / 1000) + gttl)
  return {0, hold, nowstr, ARGV[1], 1}
end
if not gid then
  gid = ARGV[1]
end
local wait = 0
for i = 1, nw do
  local size = tonumber(ARGV[3 * i + 3])
  local limit = tonumber(ARGV[3 * i + 4])
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
  return {0, wait, nowstr, gid, 0}
end
local member = nowstr .. ':' .. ARGV[1]
for i = 1, nw do
  redis.call('ZADD', KEYS[i], nowstr, member)
  redis.call('PEXPIRE', KEYS[i], ARGV[3 * i + 5])
end
redis.call('HSET', guard, 'id', gid, 'last', nowstr, 'hold', '0')
redis.call('PEXPIRE', guard, gttl)
return {1, 0, nowstr, gid, 0}
