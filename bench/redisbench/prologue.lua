-- prologue.lua: put in front of backends/redisstore/lua/native.lua by
-- run.sh, so redis-benchmark, which can only send text arguments, runs
-- Sluice's own script. It turns four text arguments (burst, count, period
-- in nanoseconds, cost) into native.lua's two binary arguments for one
-- tokenbucket take with the server's TIME and a 1 s TTL margin, as the
-- store's defaults send them. native.lua follows unchanged.
ARGV[1], ARGV[2] = struct.pack('<ddddddddd', 1000, -1, 0, 0, 1, 0, 0, 0, 0),
  struct.pack('<ddddddddddddd', 2, tonumber(ARGV[4]), tonumber(ARGV[1]),
    tonumber(ARGV[2]), tonumber(ARGV[3]), 0, 0, 0, 0, 0, 0, 0, 0)
