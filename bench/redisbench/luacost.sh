#!/bin/sh
# luacost.sh: the server-side Lua cost of one decision, without the
# network, the client or EVALSHA's own overhead. Each script body is
# wrapped in a function that one EVAL calls -i times in a loop (TIME
# before and after); the figure is the smallest of -r such runs divided by
# -i, in microseconds per call, so another process's burst of CPU does not
# count. Bodies measured, each on its own key:
#   calls       TIME, GET and SET ... PX only: the floor every script pays
#   native-gcra native.lua, a gcra take (the store's default arguments)
#   native-tb   native.lua, a tokenbucket take
#   redis_rate  go-redis/redis_rate v10's allowN script
#   plain       tokenbucket.lua
# under the limit redisload uses (1,000,000 per second, burst 1,000,000).
#
# Usage, from the bench directory, against a Redis used for nothing else
# (each EVAL blocks the server for -i calls, about 15 ms by default):
#   redisbench/luacost.sh -p 6390
set -eu

host=127.0.0.1
port=6379
rounds=30
iters=3000
usage="usage: $0 [-h host] [-p port] [-r rounds] [-i iterations per EVAL]"
while getopts h:p:r:i: opt; do
	case $opt in
	h) host=$OPTARG ;;
	p) port=$OPTARG ;;
	r) rounds=$OPTARG ;;
	i) iters=$OPTARG ;;
	*) echo "$usage" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || { echo "$usage" >&2; exit 2; }

dir=$(cd "$(dirname "$0")" && pwd)
cd "$dir/.."
cli="redis-cli -h $host -p $port"
native=../backends/redisstore/lua/native.lua
rr=$(GOWORK=off go list -m -f '{{.Dir}}' github.com/go-redis/redis_rate/v10)/lua.go
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

# The arguments native.lua receives from the store for a take: the head
# (TTL margin 1000 ms, server TIME, the algorithm's flag) and the check
# (code, cost, burst, count, period, then gcra's spans: tau, units(cost),
# units(1), debt capped at 2^52; for tokenbucket MaxDebt, 2^50). Built
# once, outside the loop.
cat >"$tmp/gcra.pre" <<'LUA'
local A1 = struct.pack('<ddddddddd', 1000, -1, 0, 1, 0, 0, 0, 0, 0)
local A2 = struct.pack('<ddddddddddddd', 1, 1, 1000000, 1000000, 1000000000, 1000000000, 0, 1000, 0, 1000, 0, 4503599627370496, 0)
LUA
cat >"$tmp/tb.pre" <<'LUA'
local A1 = struct.pack('<ddddddddd', 1000, -1, 0, 0, 1, 0, 0, 0, 0)
local A2 = struct.pack('<ddddddddddddd', 2, 1, 1000000, 1000000, 1000000000, 0, 0, 0, 0, 0, 0, 1125899906842624, 0)
LUA
# redis_rate's and plain's text arguments: burst, rate (count), period, cost
printf "local A1, A2, A3, A4 = '1000000', '1000000', '1', '1'\n" >"$tmp/rr.pre"
printf "local A1, A2, A3, A4 = '1000000', '1000000', '1000000000', '1'\n" >"$tmp/plain.pre"
: >"$tmp/calls.pre"
cat >"$tmp/calls.lua" <<'LUA'
local t = redis.call('TIME')
local s = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], '0123456789abcdefg', 'PX', 1000)
LUA
sed -n '/^var allowN = redis.NewScript(`/,/^`)/p' "$rr" | sed '1d;$d' >"$tmp/rr.lua"
[ -s "$tmp/rr.lua" ] || { echo "$0: allowN not found in $rr" >&2; exit 1; }

# harness prelude body: ARGV is set from the prelude's constants on every
# iteration (two or four table stores), then the body runs as a function.
harness() {
	pre=$1 body=$2 nargs=$3
	cat "$pre"
	echo 'local function body()'
	cat "$body"
	echo 'end'
	echo "local t0 = redis.call('TIME')"
	echo "for i = 1, tonumber(ARGV[1]) do"
	case $nargs in
	2) echo '  ARGV[1], ARGV[2] = A1, A2' ;;
	4) echo '  ARGV[1], ARGV[2], ARGV[3], ARGV[4] = A1, A2, A3, A4' ;;
	esac
	echo '  body()'
	echo 'end'
	echo "local t1 = redis.call('TIME')"
	echo 'return (t1[1] - t0[1]) * 1000000 + (t1[2] - t0[2])'
}
harness "$tmp/calls.pre" "$tmp/calls.lua" 0 >"$tmp/h-calls"
harness "$tmp/gcra.pre" "$native" 2 >"$tmp/h-native-gcra"
harness "$tmp/tb.pre" "$native" 2 >"$tmp/h-native-tb"
harness "$tmp/rr.pre" "$tmp/rr.lua" 4 >"$tmp/h-redis_rate"
harness "$tmp/plain.pre" "$dir/tokenbucket.lua" 4 >"$tmp/h-plain"

names="calls native-gcra native-tb redis_rate plain"
run=$(date +%s)
for n in $names; do
	sha=$($cli -x SCRIPT LOAD <"$tmp/h-$n")
	case $sha in
	*[!0-9a-f]* | "") echo "$0: SCRIPT LOAD of $n failed: $sha" >&2; exit 1 ;;
	esac
	echo "$sha" >"$tmp/sha-$n"
	echo 999999999999 >"$tmp/best-$n"
done
i=0
while [ $i -lt "$rounds" ]; do
	for n in $names; do
		us=$($cli EVALSHA "$(cat "$tmp/sha-$n")" 1 "rb:lua:$run:$n" "$iters")
		case $us in
		*[!0-9]* | "") echo "$0: $n failed: $us" >&2; exit 1 ;;
		esac
		[ "$us" -lt "$(cat "$tmp/best-$n")" ] && echo "$us" >"$tmp/best-$n"
	done
	i=$((i + 1))
done
for n in $names; do
	awk -v n="$n" -v us="$(cat "$tmp/best-$n")" -v it="$iters" \
		'BEGIN { printf "BenchmarkRedisLua/script=%s\t%d\t%.3f us/call\n", n, it, us / it }'
done
