#!/bin/sh
# compare.sh: the whole PostgreSQL comparison in one command. It runs
# BenchmarkPostgres (pgstore with GCRA and with the token bucket, and the
# naive one-round-trip-per-statement pgx transaction) and run.sh (pgbench,
# the hand-written ceiling of the same work) against one server, the cells
# interleaved round by round, and prints decisions per second per cell
# with the ratios the issue sets targets for:
#   sluice / pgbench   (target >= 0.80 in every cell)
#   sluice / naive     (target >= 1.5 in every cell)
# The raw lines (benchstat input) go to the output file.
#
# Usage, from anywhere, on a machine doing nothing else:
#   bench/pgbench/compare.sh [-d seconds per run] [-k rounds] [-c "1 8 32"] [-K "hot 100k"] [-s name=value]... [-o file]
# Defaults: -d 6 -k 3 -c "1 8 32" -K "hot 100k" -o pg-compare.txt (in bench/). A short
# sanity run: -d 3 -k 1 -c 8. Each -s sets a parameter of the throwaway
# server; -s synchronous_commit=off takes the commit's WAL flush (which
# dominates every cell with fsync on, and varies between rounds) out of
# both sides alike. Both sides use the same server, so they always run
# under the same settings, which the script prints.
# The server is $PGURL when set (for example the perf-anchors one,
# postgres://bench:bench@127.0.0.1:5432/bench); otherwise the script starts
# a throwaway PostgreSQL 15 with stock settings (fsync on) and
# max_connections=200 on a free loopback port, as the postgres user when
# run as root, and stops and deletes it at the end.
set -eu

secs=6
rounds=3
conc="1 8 32"
keysets="hot 100k"
outfile=pg-compare.txt
settings=""
usage="usage: $0 [-d seconds per run] [-k rounds] [-c concurrencies] [-K key sets] [-s name=value]... [-o file]"
while getopts d:k:c:K:s:o: opt; do
	case $opt in
	d) secs=$OPTARG ;;
	k) rounds=$OPTARG ;;
	c) conc=$OPTARG ;;
	K) keysets=$OPTARG ;;
	o) outfile=$OPTARG ;;
	s) settings="$settings -c $OPTARG" ;;
	*) echo "$usage" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || { echo "$usage" >&2; exit 2; }

here=$(cd "$(dirname "$0")" && pwd)
cd "$here/.."
for tool in psql pgbench go; do
	command -v "$tool" >/dev/null || { echo "$0: $tool not found" >&2; exit 1; }
done

if [ -n "${PGURL:-}" ] && [ -n "$settings" ]; then
	echo "$0: -s sets the throwaway server's parameters; set them on \$PGURL's server instead" >&2
	exit 2
fi
if [ -z "${PGURL:-}" ]; then
	bin=/usr/lib/postgresql/15/bin
	[ -x "$bin/initdb" ] || { echo "$0: set PGURL or install postgresql-15 ($bin)" >&2; exit 1; }
	tmp=$(mktemp -d /tmp/sluice-pgbench.XXXXXX)
	as=""
	if [ "$(id -u)" = 0 ]; then
		chown postgres "$tmp"
		as="runuser -u postgres --"
	fi
	port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	$as "$bin/initdb" -D "$tmp/data" -U postgres --auth=trust -E UTF8 --locale=C >"$tmp/initdb.log"
	$as "$bin/pg_ctl" -D "$tmp/data" -l "$tmp/server.log" -w \
		-o "-p $port -k $tmp -c listen_addresses=127.0.0.1 -c max_connections=200$settings" start >/dev/null
	trap '$as "$bin/pg_ctl" -D "$tmp/data" -m fast -w stop >/dev/null; rm -rf "$tmp"' EXIT INT TERM
	PGURL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
	echo "throwaway PostgreSQL on 127.0.0.1:$port"
fi
export PGURL
psql "$PGURL" -qAtc "SELECT 'server: ' || version() || '; fsync=' || current_setting('fsync') || ', synchronous_commit=' || current_setting('synchronous_commit')"

cells=$(echo "$conc" | tr ' ' '|')
keycells=$(echo "$keysets" | tr ' ' '|')
: >"$outfile"
for round in $(seq "$rounds"); do
	echo "round $round/$rounds" >&2
	if ! SLUICE_BENCH_POSTGRES_DSN=$PGURL GOWORK=off go test -run '^$' -bench "BenchmarkPostgres\$/keys=($keycells)/conc=($cells)/" \
		-benchtime "${secs}s" -benchmem -count 1 . >"$outfile.go"; then
		cat "$outfile.go" >&2
		exit 1
	fi
	grep '^Benchmark' "$outfile.go" >>"$outfile"
	rm -f "$outfile.go"
	SECONDS_PER_RUN=$secs CONCURRENCY=$conc KEYSETS=$keysets sh "$here/run.sh" >>"$outfile"
done

# Mean ns/op per cell and implementation, as decisions per second.
awk '
	{
		split($1, part, "/")
		cell = part[2] " " part[3]
		impl = part[4]; sub(/^impl=/, "", impl); sub(/-[0-9]+$/, "", impl)
		sum[cell, impl] += $3; n[cell, impl]++
		if (!(cell in seen)) { seen[cell] = 1; order[++cells] = cell }
	}
	function rate(c, i) { return n[c, i] ? 1e9 / (sum[c, i] / n[c, i]) : 0 }
	function ratio(a, b) { return b ? sprintf("%.2f", a / b) : "-" }
	END {
		printf "%-22s %9s %9s %9s %9s %13s %13s %13s\n", "cell (decisions/s)", "pgbench", "gcra", "tokenbkt", "naive",
			"gcra/pgbench", "tb/pgbench", "gcra/naive"
		for (k = 1; k <= cells; k++) {
			c = order[k]
			p = rate(c, "pgbench"); g = rate(c, "sluice-gcra"); t = rate(c, "sluice-tokenbucket"); v = rate(c, "naive-pgx")
			printf "%-22s %9.0f %9.0f %9.0f %9.0f %13s %13s %13s\n", c, p, g, t, v, ratio(g, p), ratio(t, p), ratio(g, v)
		}
	}' "$outfile"
echo "raw lines: $outfile, relative to bench/ (benchstat -col /impl)"
