#!/bin/sh
# Raw ceiling for BenchmarkPostgres: pgbench running forupdate.sql at
# concurrency 1, 8 and 32, on one hot key and on 100k keys, against a
# table of pgstore's schema holding a row for every key (as
# BenchmarkPostgres's tables do). Each result is printed as a Go benchmark
# line (impl=pgbench, ns/op = 1e9 / tps) so benchstat can put it beside
# BenchmarkPostgres's; compare.sh runs both.
# Usage: PGURL=postgres://user:pass@127.0.0.1:5432/db sh bench/pgbench/run.sh
# Environment: SECONDS_PER_RUN (default 6), CONCURRENCY (default "1 8 32"),
# KEYSETS (default "hot 100k").
set -eu
: "${PGURL:?set PGURL to the benchmark database}"
here=$(cd "$(dirname "$0")" && pwd)
psql "$PGURL" -q -v ON_ERROR_STOP=1 <<'SQL'
SET client_min_messages = warning;
DROP TABLE IF EXISTS bench_pgbench;
CREATE TABLE bench_pgbench (
    namespace  bytea       NOT NULL,
    key        bytea       NOT NULL,
    algorithm  text        NOT NULL,
    state      bytea       NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (namespace, key)
) WITH (fillfactor = 80);
INSERT INTO bench_pgbench
SELECT convert_to('gcra', 'UTF8'), convert_to(k, 'UTF8'), 'gcra', '', clock_timestamp() + interval '1 hour'
FROM (SELECT 'user:' || lpad(g::text, 7, '0') FROM generate_series(0, 99999) g UNION ALL SELECT 'hot') keys(k);
VACUUM ANALYZE bench_pgbench;
SQL
for keys in ${KEYSETS:-hot 100k}; do
	n=1
	[ "$keys" = 100k ] && n=100000
	for c in ${CONCURRENCY:-1 8 32}; do
		pgbench -n -M prepared -j 2 -c "$c" -T "${SECONDS_PER_RUN:-6}" -D keys="$n" -f "$here/forupdate.sql" "$PGURL" |
			awk -v procs="$(nproc)" -v name="BenchmarkPostgres/keys=$keys/conc=$c/impl=pgbench" '
				/^number of transactions actually processed/ { split($0, f, ": "); split(f[2], g, "/"); n = g[1] }
				/^tps/ { printf "%s-%d\t%d\t%.0f ns/op\n", name, procs, n, 1e9 / $3 }'
	done
done
