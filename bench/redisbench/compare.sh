#!/bin/sh
# compare.sh: the whole Redis comparison in one command. It starts a
# throwaway redis-server on a free loopback port (no persistence), runs
# redisload (sluice-gcra, sluice-tokenbucket, their autopipelined "-ap"
# variants, redis_rate, raw-tokenbucket, the Go floor, and
# goredis-tokenbucket, the go-redis floor) and run.sh
# (the redis-benchmark EVALSHA ceiling) against it at concurrency 1, 8 and
# 64 on one hot key and on a million keys, stops the server, and prints
# mean ops/s per setting and the ratios the issue sets targets for (then
# the same ratios per round, as median and range over the rounds):
#   gcra/rr, tb/rr    sluice / redis_rate (target >= 1 at every setting)
#   gap/rr, tbap/rr   the same through redisstore.WithAutoPipeline
#   tb/nat            sluice-tokenbucket / the ceiling running native.lua,
#                     the same script (target >= 0.85)
#   tbap/nat          the same through redisstore.WithAutoPipeline
#   tb/plain          the same against the plain token-bucket script
#   rr/nat            redis_rate / the native ceiling
#   raw/nat           raw-tokenbucket (sluice-tokenbucket's very command on
#                     a bare net.Conn, no client library) / the ceiling:
#                     the most any Go client gets without batching calls
#   gr/nat            goredis-tokenbucket (the same command through the
#                     go-redis client, no store) / the ceiling: the most a
#                     store on go-redis gets without batching calls
#   tb/raw            sluice-tokenbucket / raw-tokenbucket: what go-redis
#                     and the store cost over that floor
#   tb/gr             sluice-tokenbucket / goredis-tokenbucket: what the
#                     store alone costs
#
# redisbench/luacost.sh measures the scripts' Lua cost alone.
#
# -P pins the server to CPU 1 and every client (redisload, redis-benchmark)
# to CPU 0 with taskset, as if they ran on separate machines: the clients'
# threads no longer compete with the server for its core, and on a small
# shared machine the runs drift far less. Without it the scheduler places
# them freely.
#
# Usage, from the bench directory, on a machine doing nothing else:
#   redisbench/compare.sh [-P] [-p port] [-d seconds per run] [-k rounds] [-n ceiling requests] [-o file]
# Defaults: -p 6390 -d 10 -k 3 -n 200000 -o redis-compare.txt (the raw
# lines, readable by benchstat). A short sanity run: -d 2 -k 1 -n 20000.
set -eu

port=6390
secs=10
rounds=3
requests=200000
outfile=redis-compare.txt
pin_srv=""
pin_cli=""
usage="usage: $0 [-P] [-p port] [-d seconds per run] [-k rounds] [-n ceiling requests] [-o file]"
while getopts Pp:d:k:n:o: opt; do
	case $opt in
	P) pin_srv="taskset -c 1" pin_cli="taskset -c 0" ;;
	p) port=$OPTARG ;;
	d) secs=$OPTARG ;;
	k) rounds=$OPTARG ;;
	n) requests=$OPTARG ;;
	o) outfile=$OPTARG ;;
	*) echo "$usage" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || { echo "$usage" >&2; exit 2; }

dir=$(cd "$(dirname "$0")" && pwd)
cd "$dir/.."
for tool in redis-server redis-cli go; do
	command -v "$tool" >/dev/null || { echo "$0: $tool not found" >&2; exit 1; }
done
if [ -n "$pin_srv" ]; then
	command -v taskset >/dev/null || { echo "$0: -P needs taskset (util-linux)" >&2; exit 1; }
	[ "$(nproc)" -ge 2 ] || { echo "$0: -P needs 2 CPUs" >&2; exit 1; }
fi
if redis-cli -p "$port" ping >/dev/null 2>&1; then
	echo "$0: something already answers on port $port; choose another with -p" >&2
	exit 1
fi
tmp=$(mktemp -d)
GOWORK=off go build -o "$tmp/redisload" ./redisload
$pin_srv redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
	--dir "$tmp" --logfile "$tmp/redis.log" --daemonize no &
pid=$!
cleanup() {
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
i=0
until redis-cli -p "$port" ping >/dev/null 2>&1; do
	i=$((i + 1))
	[ $i -lt 100 ] || { echo "$0: redis-server on port $port did not start" >&2; exit 1; }
	sleep 0.1
done

: >"$outfile"
# Each setting's load runs and its ceiling run follow each other, so a
# drift of the machine between minutes (up to ~20% here) moves both.
round=1
while [ $round -le "$rounds" ]; do
	for keys in 1 1M; do
		for c in 1 8 64; do
			$pin_cli "$tmp/redisload" -addr "127.0.0.1:$port" -duration "${secs}s" -keys "$keys" -conc "$c" | tee -a "$outfile"
			redis-cli -p "$port" flushall >/dev/null
			$pin_cli "$dir/run.sh" -p "$port" -n "$requests" -k "$keys" -c "$c" | tee -a "$outfile"
			redis-cli -p "$port" flushall >/dev/null
		done
	done
	round=$((round + 1))
done

# One pass over the results prints two tables: mean ops/s per setting and
# the ratios of those means; then the same ratios taken within each round,
# as their median and range over the rounds (the drift between rounds
# shows in the range, where the means hide it).
echo
awk '
	/^Benchmark/ {
		split($1, p, "/")
		key = p[2] "/" p[3]
		who = p[4]
		sub(/^impl=|^script=/, "", who)
		if (p[1] == "BenchmarkRedisCeiling") who = "ceiling-" who
		for (i = 2; i < NF; i++) if ($(i + 1) == "ops/s") v = $i
		r = ++cnt[key, who]
		val[key, who, r] = v
		if (r > rounds) rounds = r
		if (!(key in seen)) { seen[key] = 1; order[++n] = key }
	}
	function mean(k, w,   i, sum) {
		for (i = 1; i <= cnt[k, w]; i++) sum += val[k, w, i]
		return cnt[k, w] ? sum / cnt[k, w] : 0
	}
	function ratio(a, b) { return b ? sprintf("%.2f", a / b) : "-" }
	# cell returns the median (min-max) of a/b over the rounds holding both.
	function cell(k, a, b,   i, m, x, j, t) {
		m = 0
		for (i = 1; i <= rounds; i++)
			if (val[k, b, i] > 0 && val[k, a, i] != "") x[++m] = val[k, a, i] / val[k, b, i]
		if (m == 0) return "-"
		for (i = 2; i <= m; i++)
			for (j = i; j > 1 && x[j] < x[j - 1]; j--) { t = x[j]; x[j] = x[j - 1]; x[j - 1] = t }
		t = (m % 2) ? x[(m + 1) / 2] : (x[m / 2] + x[m / 2 + 1]) / 2
		return sprintf("%.2f (%.2f-%.2f)", t, x[1], x[m])
	}
	END {
		ni = split("sluice-gcra:gcra sluice-tokenbucket:tokenbucket sluice-gcra-ap:gcra-ap sluice-tokenbucket-ap:tb-ap redis_rate:redis_rate raw-tokenbucket:raw goredis-tokenbucket:goredis ceiling-native:ceil-native ceiling-plain:ceil-plain", impls, " ")
		nc = split("sluice-gcra:redis_rate:gcra/rr sluice-tokenbucket:redis_rate:tb/rr sluice-gcra-ap:redis_rate:gap/rr sluice-tokenbucket-ap:redis_rate:tbap/rr sluice-tokenbucket:ceiling-native:tb/nat sluice-tokenbucket-ap:ceiling-native:tbap/nat sluice-tokenbucket:ceiling-plain:tb/plain redis_rate:ceiling-native:rr/nat raw-tokenbucket:ceiling-native:raw/nat goredis-tokenbucket:ceiling-native:gr/nat sluice-tokenbucket:raw-tokenbucket:tb/raw sluice-tokenbucket:goredis-tokenbucket:tb/gr", cols, " ")
		printf "%-16s", "setting"
		for (c = 1; c <= ni; c++) { split(impls[c], f, ":"); printf " %11s", f[2] }
		for (c = 1; c <= nc; c++) { split(cols[c], f, ":"); printf " %8s", f[3] }
		printf "\n"
		for (i = 1; i <= n; i++) {
			printf "%-16s", order[i]
			for (c = 1; c <= ni; c++) { split(impls[c], f, ":"); printf " %11.0f", mean(order[i], f[1]) }
			for (c = 1; c <= nc; c++) { split(cols[c], f, ":"); printf " %8s", ratio(mean(order[i], f[1]), mean(order[i], f[2])) }
			printf "\n"
		}
		printf "\n%-16s", "per round"
		for (c = 1; c <= nc; c++) { split(cols[c], f, ":"); printf " %17s", f[3] }
		printf "\n"
		for (i = 1; i <= n; i++) {
			printf "%-16s", order[i]
			for (c = 1; c <= nc; c++) { split(cols[c], f, ":"); printf " %17s", cell(order[i], f[1], f[2]) }
			printf "\n"
		}
	}' "$outfile"
