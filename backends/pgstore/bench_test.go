package pgstore

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// benchKeys is how many keys the keys=random runs spread over; they are
// seeded before timing, as a long-running service's table would be.
const benchKeys = 100_000

// benchLimit admits every call, so every decision writes.
var benchLimit = ratelimit.Limit{Count: 1 << 30, Period: time.Second, Burst: 1 << 30}

// BenchmarkApply measures decisions per second against the test server:
// the store's two-round-trip transaction (impl=batched) against the same
// statements each sent as its own round trip (impl=naive, 6), and the
// store on an UNLOGGED table (impl=batched-unlogged), on one
// hot key, on 100k random keys, and for a three-rule composite, with 1, 8
// and 32 concurrent callers.
func BenchmarkApply(b *testing.B) {
	pool := newPool(b, func(c *pgxpool.Config) { c.MaxConns = 40 })
	s := newBenchStore(b, pool)
	unlogged := newBenchStore(b, pool, WithUnlogged())
	check := func(key string) ratelimit.Check {
		return ratelimit.Check{Namespace: "bench", Key: key, Algorithm: gcra.New(), Limit: benchLimit, Cost: 1}
	}
	randomKey := func(r *rand.Rand) string { return "k" + strconv.Itoa(r.IntN(benchKeys)) }
	impls := []struct {
		name  string
		apply func(ctx context.Context, r *rand.Rand, keys func(*rand.Rand) string) error
	}{
		{"batched", func(ctx context.Context, r *rand.Rand, keys func(*rand.Rand) string) error {
			_, err := s.Apply(ctx, check(keys(r)))
			return err
		}},
		{"batched-unlogged", func(ctx context.Context, r *rand.Rand, keys func(*rand.Rand) string) error {
			_, err := unlogged.Apply(ctx, check(keys(r)))
			return err
		}},
		{"naive", func(ctx context.Context, r *rand.Rand, keys func(*rand.Rand) string) error {
			return naiveApply(ctx, pool, s, check(keys(r)))
		}},
	}
	workloads := []struct {
		name string
		keys func(*rand.Rand) string
	}{
		{"keys=hot", func(*rand.Rand) string { return "hot" }},
		{"keys=random", randomKey},
	}
	for _, conc := range []int{1, 8, 32} {
		for _, impl := range impls {
			for _, w := range workloads {
				b.Run("impl="+impl.name+"/"+w.name+"/conc="+strconv.Itoa(conc), func(b *testing.B) {
					runBench(b, conc, func(ctx context.Context, r *rand.Rand) error { return impl.apply(ctx, r, w.keys) })
				})
			}
		}
		b.Run("impl=batched/composite=3/conc="+strconv.Itoa(conc), func(b *testing.B) {
			runBench(b, conc, func(ctx context.Context, r *rand.Rand) error {
				checks := []ratelimit.Check{check(randomKey(r)), check(randomKey(r)), check(randomKey(r))}
				var out [3]ratelimit.Outcome
				_, err := s.ApplyAll(ctx, checks, out[:])
				return err
			})
		})
	}
}

// newBenchStore returns a store on a new table holding benchKeys seeded
// rows, vacuumed and analyzed.
func newBenchStore(b *testing.B, pool *pgxpool.Pool, opts ...Option) *Store {
	s := newStoreOn(b, pool, append([]Option{WithTable(randomName("bench_"))}, opts...)...)
	_, err := pool.Exec(b.Context(), "INSERT INTO "+s.Table()+" (namespace, key, algorithm, state, expires_at) "+
		"SELECT 'bench', convert_to('k' || g, 'UTF8'), 'gcra', '', clock_timestamp() + interval '1 hour' "+
		"FROM generate_series(0, $1::int - 1) g ON CONFLICT DO NOTHING", benchKeys)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(b.Context(), "VACUUM ANALYZE "+s.Table()); err != nil {
		b.Fatal(err)
	}
	return s
}

// runBench runs op b.N times over conc goroutines.
func runBench(b *testing.B, conc int, op func(context.Context, *rand.Rand) error) {
	b.ReportAllocs()
	if conc == 1 {
		r := rand.New(rand.NewPCG(1, 2))
		for b.Loop() {
			if err := op(b.Context(), r); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	// RunParallel starts parallelism × GOMAXPROCS goroutines.
	b.SetParallelism(max(1, conc/runtime.GOMAXPROCS(0)))
	var seed atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		r := rand.New(rand.NewPCG(seed.Add(1), 2))
		for pb.Next() {
			if err := op(b.Context(), r); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// naiveApply is the store's transaction written the straightforward way,
// every statement its own round trip: BEGIN, timeouts, seed, lock (which
// reads the clock), update, COMMIT, 6 per decision; the store sends the
// same 6 statements in 2.
func naiveApply(ctx context.Context, pool *pgxpool.Pool, s *Store, c ratelimit.Check) error {
	ctx, cancel := s.withDeadline(ctx)
	defer cancel()
	t, err := s.timeouts(ctx)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		ns, key, name := []byte(c.Namespace), []byte(c.Key), c.Algorithm.Name()
		if _, err := tx.Exec(ctx, s.q.setTimeouts, t.lock, t.statement, t.idle); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, s.q.seed, ns, key, name); err != nil {
			return err
		}
		var alg string
		var state []byte
		var expires, now time.Time
		if err := tx.QueryRow(ctx, s.q.lock, ns, key).Scan(&alg, &state, &expires, &now); err != nil {
			return err
		}
		if expires.Before(now) {
			state = nil
		}
		o, next, err := ratelimit.Evaluate(c.Algorithm, c.Op, state, now.UnixNano(), c.Limit, c.Cost, c.MaxWait, nil)
		if err != nil || !o.Changed {
			return err
		}
		_, err = tx.Exec(ctx, s.q.update, ns, key, name, next, expiry(now.UnixNano(), o.TTL))
		return err
	})
}
