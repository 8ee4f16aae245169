-- tokenbucket.lua: a plain token bucket, the kind of script a limiter
-- without exactness guarantees runs: server TIME, GET, refill with
-- doubles, SET with PX. It reads and writes the 25-byte state layout of
-- algorithms/tokenbucket, so Redis stores values of the same size, but its
-- arithmetic is approximate (nanosecond instants near 2^61 lose their low
-- bits in a double). It is a yardstick for run.sh, not a reference.
-- KEYS[1]: the state key. ARGV: burst, count, period (ns), cost.
-- Returns {allowed (1 or 0), remaining tokens}.
local burst, count, period, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local t = redis.call('TIME')
local now = t[1] * 1e9 + t[2] * 1000
local tokens = burst
local s = redis.call('GET', KEYS[1])
if s then
  local _, n, _, hi, lo = struct.unpack('>Bi8i8i4I4', s)
  local elapsed = now - (hi * 4294967296 + lo)
  if elapsed < 0 then elapsed = 0 end
  tokens = math.min(burst, n + math.floor(elapsed * count / period))
end
if tokens < cost then
  return {0, tokens}
end
tokens = tokens - cost
local hi = math.floor(now / 4294967296)
redis.call('SET', KEYS[1], struct.pack('>Bi8i8i4I4', 0x11, tokens, 0, hi, now - hi * 4294967296),
  'PX', math.ceil((burst - tokens) * period / count / 1e6) + 1000)
return {1, tokens}
