#!/bin/sh
# Raw ceiling for BenchmarkPostgres: pgbench running forupdate.sql at the
# same concurrencies, on one hot key and on 100k keys.
# Usage: PGURL=postgres://user:pass@127.0.0.1:5432/db sh bench/pgbench/run.sh
set -eu
: "${PGURL:?set PGURL to the benchmark database}"
here=$(cd "$(dirname "$0")" && pwd)
psql "$PGURL" -q -c 'DROP TABLE IF EXISTS bench_pgbench' \
	-c 'CREATE TABLE bench_pgbench (key int PRIMARY KEY, tokens bigint NOT NULL, ts bigint NOT NULL) WITH (fillfactor = 80)' \
	-c 'INSERT INTO bench_pgbench SELECT g, 1000000, 0 FROM generate_series(1, 100000) g'
for keys in 1 100000; do
	for c in 1 8 32; do
		printf 'keys=%s conc=%s: ' "$keys" "$c"
		pgbench -n -M prepared -j 2 -c "$c" -T "${SECONDS_PER_RUN:-6}" -D keys="$keys" -f "$here/forupdate.sql" "$PGURL" |
			awk '/^tps/ {print $3 " tps"} /latency average/ {printf "latency avg %s ms, ", $4}'
	done
done
