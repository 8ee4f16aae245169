-- cas.lua: the second step of the generic path, all or nothing.
-- KEYS: the state keys, distinct.
-- ARGV: three values per key: the state read in step one ('' when
-- missing), the new state, and the expiry in milliseconds ('' to leave the
-- key as it is, '0' to delete it, n > 0 to SET it with PX n).
-- Writes only when every key still holds the state read in step one.
-- Returns {1} when written, else {0, seconds, microseconds, state1, ...}
-- with a fresh snapshot (as read.lua) so the caller can decide again
-- without another round trip.
local n = #KEYS
local cur = {}
local same = true
for i = 1, n do
  local v = redis.call('GET', KEYS[i])
  cur[i] = v
  if (v or '') ~= ARGV[3 * i - 2] then
    same = false
  end
end
if not same then
  local t = redis.call('TIME')
  local r = {0, t[1], t[2]}
  for i = 1, n do
    r[i + 3] = cur[i]
  end
  return r
end
for i = 1, n do
  local px = ARGV[3 * i]
  if px == '0' then
    redis.call('DEL', KEYS[i])
  elseif px ~= '' then
    redis.call('SET', KEYS[i], ARGV[3 * i - 1], 'PX', px)
  end
end
return {1}
