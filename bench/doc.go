// Package bench holds side-by-side benchmarks of Sluice against the Go rate
// limiters users know: golang.org/x/time/rate, sethvargo/go-limiter and
// ulule/limiter for the in-memory store. It is its own module, outside
// go.work, so the competitors never enter the project's dependency graph.
//
// Run from this directory (GOWORK=off: the module is outside the
// repository's go.work, which would otherwise refuse it):
//
//	GOWORK=off go test -run '^$' -bench 'Local|Algorithm' -benchmem -count 6 . | tee new.txt
//	GOWORK=off go tool -modfile=../tools/go.mod benchstat -col /impl new.txt
//	GOWORK=off go test -run '^$' -bench MemoryPerKey -benchtime 1x . # B/key
//
// `make bench` at the repository root runs every benchmark of the module
// the same way.
//
// The Redis and PostgreSQL benchmarks need a server: SLUICE_BENCH_REDIS_ADDR
// and SLUICE_BENCH_POSTGRES_DSN, or skip. Two scripts run each whole
// comparison against a throwaway server they start on loopback, with the
// competitors and the raw ceilings (redis-benchmark EVALSHA, pgbench) in
// the same run, and print the ratios the issues set targets for:
//
//	redisbench/compare.sh   # redisload (ops/s, p50/p99/p99.9) vs redis_rate, a bare-connection Go floor, a go-redis floor and the EVALSHA ceiling (-P: server and clients on separate CPUs)
//	pgbench/compare.sh      # BenchmarkPostgres vs the naive pgx transaction and pgbench
//
// Sub-benchmark names are key=value pairs (keys=1/impl=sluice-gcra) so
// benchstat can pivot on any of them.
package bench
