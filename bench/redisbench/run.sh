#!/bin/sh
# run.sh: the raw ceiling for the Redis benchmarks. redis-benchmark sends
# EVALSHA of a token-bucket script from -c connections, one request at a
# time each (no pipelining, like the Go clients), with no Go client in the
# way. Two scripts:
#   script=native  Sluice's own native.lua, the same Lua work as
#                  redisstore's tokenbucket take. redis-benchmark can send
#                  only text arguments (no NUL bytes), so run.sh loads
#                  native.lua behind a one-line prologue that sets ARGV[1]
#                  and ARGV[2] to the binary arguments the store would send,
#                  written as Lua string constants (built once, here, by
#                  Redis's own struct.pack): two table stores per call, so
#                  the script does no more work than the store's.
#   script=plain   tokenbucket.lua: a minimal approximate token bucket with
#                  text arguments, a stricter yardstick.
# Each on one hot key (keys=1) and on keys drawn from a million (keys=1M,
# redis-benchmark -r), under the limit redisload uses (1,000,000 per
# second, burst 1,000,000: every call admitted, every call writes).
#
# Usage, from the bench directory, against a Redis used for nothing else:
#   redis-server --port 6390 --save '' --appendonly no &
#   redisbench/run.sh -p 6390 -n 200000 | tee ceiling.txt
#
# Output: one line per run in Go benchmark format (ops/s and latency
# percentiles in microseconds, as redisload prints), so the ceiling and
# redisload's figures sit side by side in benchstat or a spreadsheet.
set -eu

host=127.0.0.1
port=6379
requests=100000
concs="1 8 64"
keysets="1 1M"
usage="usage: $0 [-h host] [-p port] [-n requests per run] [-c 'conc ...'] [-k 'keys ...']"
while getopts h:p:n:c:k: opt; do
	case $opt in
	h) host=$OPTARG ;;
	p) port=$OPTARG ;;
	n) requests=$OPTARG ;;
	c) concs=$OPTARG ;;
	k) keysets=$OPTARG ;;
	*) echo "$usage" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || { echo "$usage" >&2; exit 2; }

for tool in redis-cli redis-benchmark; do
	command -v "$tool" >/dev/null || { echo "$0: $tool not found (apt-get install redis-tools)" >&2; exit 1; }
done

dir=$(cd "$(dirname "$0")" && pwd)
native=$dir/../../backends/redisstore/lua/native.lua
cli="redis-cli -h $host -p $port"

# SCRIPT LOAD prints the SHA1; an error reply comes back as text too.
load() {
	sha=$($cli -x SCRIPT LOAD)
	case $sha in
	*[!0-9a-f]* | "") echo "$0: SCRIPT LOAD failed: $sha" >&2; exit 1 ;;
	esac
	echo "$sha"
}

# The limit: burst, count, period in ns, cost.
burst=1000000 count=1000000 period=1000000000 cost=1
limit="$burst $count $period $cost"

# literal prints struct.pack(format, values...) as a Lua string literal of
# \ddd escapes, computed by the server's struct library.
literal() {
	$cli EVAL "return (struct.pack(ARGV[1], unpack(ARGV, 2)):gsub('.', function(c) return string.format('\\\\%03d', c:byte()) end))" 0 "$@"
}
# native.lua's arguments for one tokenbucket take (algorithm code 2) with
# the server's TIME and the store's default 1 s TTL margin; see native.go.
head=$(literal '<ddddddddd' 1000 -1 0 0 1 0 0 0 0)
check=$(literal '<ddddddddddddd' 2 $cost $burst $count $period 0 0 0 0 0 0 0 0)
sha_native=$({ printf 'ARGV[1], ARGV[2] = "%s", "%s"\n' "$head" "$check"; cat "$native"; } | load)
sha_plain=$(load <"$dir/tokenbucket.lua")
run=$(date +%s)

# Check once that each script admits a call, so a broken script is not
# measured as a fast one: native.lua answers 8 doubles (status 1, allowed
# 1, ...), 64 bytes; tokenbucket.lua answers {1, remaining}.
n=$($cli EVALSHA "$sha_native" 1 "rb:$run:check:n" $limit | wc -c)
[ "$n" -eq 65 ] || { echo "$0: native.lua answered $n bytes, want 64 and a newline" >&2; exit 1; }
a=$($cli EVALSHA "$sha_plain" 1 "rb:$run:check:p" $limit | head -n 1)
[ "$a" = 1 ] || { echo "$0: tokenbucket.lua answered $a, want 1 (allowed)" >&2; exit 1; }

for keys in $keysets; do
	case $keys in
	1 | 1M) ;;
	*) echo "$0: key set $keys: want 1 or 1M" >&2; exit 2 ;;
	esac
	for c in $concs; do
		for script in native plain; do
			if [ $script = native ]; then sha=$sha_native; else sha=$sha_plain; fi
			if [ $keys = 1 ]; then
				key="rb:$run:$c:hot"
				rnd=""
			else
				key="rb:$run:$c:user:__rand_int__"
				rnd="-r 1000000"
			fi
			# --csv: "test","rps","avg_latency_ms","min_latency_ms",
			# "p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
			# shellcheck disable=SC2086 # $rnd and $limit are split on purpose
			redis-benchmark -h "$host" -p "$port" -n "$requests" -c "$c" $rnd --csv \
				EVALSHA "$sha" 1 "$key" $limit |
				awk -F'"' -v name="BenchmarkRedisCeiling/keys=$keys/conc=$c/script=$script" -v n="$requests" '
					$2 == "test" { next }
					NF >= 16 {
						rps = $4
						printf "%s\t%d\t%.1f ns/op\t%.0f ops/s\t%.1f p50-us\t%.1f p95-us\t%.1f p99-us\n",
							name, n, 1e9 / rps, rps, $10 * 1000, $12 * 1000, $14 * 1000
					}'
		done
	done
done
