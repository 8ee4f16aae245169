-- read.lua: the first step of the generic path.
-- KEYS: the state keys. ARGV: none.
-- Returns {seconds, microseconds, state1, state2, ...} where seconds and
-- microseconds are the server's TIME and a missing state is nil.
local t = redis.call('TIME')
local r = {t[1], t[2]}
for i = 1, #KEYS do
  r[i + 2] = redis.call('GET', KEYS[i])
end
return r
