// Package bench holds side-by-side benchmarks of Sluice against the Go rate
// limiters users know: golang.org/x/time/rate, sethvargo/go-limiter and
// ulule/limiter for the in-memory store. It is its own module, outside
// go.work, so the competitors never enter the project's dependency graph.
//
// Run from this directory:
//
//	go test -run '^$' -bench . -benchmem -count 10 . | tee new.txt
//	go tool -modfile=../tools/go.mod benchstat -col /impl new.txt
//
// Sub-benchmark names are key=value pairs (keys=1/impl=sluice-gcra) so
// benchstat can pivot on any of them.
package bench
