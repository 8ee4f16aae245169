package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/backends/pgstore"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// pgPool connects to SLUICE_BENCH_POSTGRES_DSN or skips.
func pgPool(b testing.TB) *pgxpool.Pool {
	dsn := os.Getenv("SLUICE_BENCH_POSTGRES_DSN")
	if dsn == "" {
		b.Skip("set SLUICE_BENCH_POSTGRES_DSN to a PostgreSQL to benchmark against")
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 64
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	return p
}

// pgOpen admits every call; the work per call is the same as when limits bite.
var pgOpen = ratelimit.PerSecond(1_000_000)

// pgKeys is how many keys the keys=100k cells spread over. Every key, and
// the hot one, has a row before timing starts, as in a long-running
// service's table and in bench/pgbench/run.sh's.
const pgKeys = 100_000

// pgKey returns key i of the keys=100k cells ("user:0000042"), the same
// names bench/pgbench/forupdate.sql builds.
func pgKey(i int) string { return fmt.Sprintf("user:%07d", i) }

// pgTable creates a new pgstore table named name (dropping any older one)
// and gives every namespace in namespaces a row (empty state) for the hot
// key and the pgKeys keys.
func pgTable(b testing.TB, p *pgxpool.Pool, name string, namespaces ...string) *pgstore.Store {
	s, err := pgstore.New(p, pgstore.WithTable(name))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	if _, err := p.Exec(ctx, "DROP TABLE IF EXISTS "+s.Table()); err != nil {
		b.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	for _, ns := range namespaces {
		_, err := p.Exec(ctx, "INSERT INTO "+s.Table()+" (namespace, key, algorithm, state, expires_at) "+
			"SELECT convert_to($1, 'UTF8'), convert_to(k, 'UTF8'), $1, '', clock_timestamp() + interval '1 hour' "+
			"FROM (SELECT 'user:' || lpad(g::text, 7, '0') FROM generate_series(0, $2::int - 1) g UNION ALL SELECT 'hot') keys(k) "+
			"ON CONFLICT DO NOTHING", ns, pgKeys)
		if err != nil {
			b.Fatal(err)
		}
	}
	if _, err := p.Exec(ctx, "VACUUM ANALYZE "+s.Table()); err != nil {
		b.Fatal(err)
	}
	return s
}

// pgErrors counts the failed calls of one implementation. A benchmark
// reports them as errors/op instead of failing at the first one: on a
// loaded machine a rare commit can outlast the 2s deadline, and one such
// call should not discard a whole run.
type pgErrors struct {
	n    atomic.Int64
	last atomic.Value // error
}

func (e *pgErrors) add(err error) {
	e.n.Add(1)
	e.last.Store(err)
}

// report reports the errors since the last report as errors/op, and fails
// b when more than 1% of its calls failed.
func (e *pgErrors) report(b *testing.B) {
	n := e.n.Swap(0)
	if n == 0 {
		return
	}
	b.ReportMetric(float64(n)/float64(b.N), "errors/op")
	b.Logf("%d of %d calls failed, the last with: %v", n, b.N, e.last.Load())
	if n*100 > int64(b.N) {
		b.Fail()
	}
}

// sluicePG is a Limiter on store whose rule (and so namespace) is named
// after the algorithm.
func sluicePG(b testing.TB, store *pgstore.Store, alg ratelimit.Algorithm, errs *pgErrors) taker {
	lim, err := sluice.New(sluice.Rule{Name: alg.Name(), Algorithm: alg, Limit: pgOpen, Budget: benchBudget}, sluice.WithStore(store))
	if err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context, key string) bool {
		d, err := lim.Allow(ctx, key)
		if err != nil {
			errs.add(err)
		}
		return d.Allowed
	}
}

// The statements pgstore sends for one key (its table, its SQL).
const (
	naiveTimeouts = "SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true), " +
		"set_config('idle_in_transaction_session_timeout', $3, true)"
	naiveSeed = "INSERT INTO bench_naive (namespace, key, algorithm, state, expires_at) " +
		"SELECT $1, $2, $3, '', clock_timestamp() + interval '1 minute' " +
		"WHERE NOT EXISTS (SELECT FROM bench_naive WHERE namespace = $1 AND key = $2) " +
		"ON CONFLICT (namespace, key) DO NOTHING"
	naiveLock = "SELECT algorithm, state, expires_at, clock_timestamp() FROM (SELECT algorithm, state, expires_at " +
		"FROM bench_naive WHERE namespace = $1 AND key = $2 FOR UPDATE) locked"
	naiveUpdate = "UPDATE bench_naive SET algorithm = $3, state = $4, expires_at = $5 WHERE namespace = $1 AND key = $2"
)

// naivePG is pgstore's transaction written the straightforward way with
// pgx: the same statements on a table of the same schema (BEGIN ISOLATION
// LEVEL READ COMMITTED, the server-side timeouts, the seed, the lock that
// reads the clock, the decision in Go by the same algorithm, the update,
// COMMIT), each statement its own round trip: 6 per decision where
// pgstore needs 2. Statements are prepared once per connection by pgx's
// statement cache, as pgstore's are by pgstore.
func naivePG(b testing.TB, p *pgxpool.Pool, alg ratelimit.Algorithm, errs *pgErrors) taker {
	pgTable(b, p, "bench_naive", alg.Name())
	ns, name := []byte(alg.Name()), alg.Name()
	return func(ctx context.Context, key string) bool {
		ctx, cancel := context.WithTimeout(ctx, pgstore.DefaultTimeout)
		defer cancel()
		left := pgstore.DefaultTimeout
		ms := func(d time.Duration) string { return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms" }
		allowed := false
		err := pgx.BeginTxFunc(ctx, p, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			k := []byte(key)
			if _, err := tx.Exec(ctx, naiveTimeouts, ms(left-pgstore.DefaultLockMargin), ms(left-pgstore.DefaultStatementMargin), ms(left)); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, naiveSeed, ns, k, name); err != nil {
				return err
			}
			var rowAlg string
			var state []byte
			var expires, now time.Time
			if err := tx.QueryRow(ctx, naiveLock, ns, k).Scan(&rowAlg, &state, &expires, &now); err != nil {
				return err
			}
			if !expires.After(now) {
				state = nil
			}
			o, next, err := ratelimit.Evaluate(alg, ratelimit.OpTake, state, now.UnixNano(), pgOpen, 1, 0, nil)
			if err != nil {
				return err
			}
			allowed = o.Allowed
			if !o.Changed {
				return nil
			}
			_, err = tx.Exec(ctx, naiveUpdate, ns, k, name, next, now.Add(o.TTL))
			return err
		})
		if err != nil {
			errs.add(err)
		}
		return allowed
	}
}

// pgKeyChooser returns a function picking the hot key or one of the pgKeys
// seeded keys.
func pgKeyChooser(hot bool) func(*rand.Rand) string {
	if hot {
		return func(*rand.Rand) string { return "hot" }
	}
	keys := make([]string, pgKeys)
	for i := range keys {
		keys[i] = pgKey(i)
	}
	return func(r *rand.Rand) string { return keys[r.IntN(len(keys))] }
}

// BenchmarkPostgres compares pgstore with the naive transaction at
// concurrency 1, 8 and 32, on one hot key and on 100k keys, all with rows
// already (the cold path, a never-seen key, adds an INSERT to both). The
// pgbench ceiling of the same work is bench/pgbench/run.sh, and
// bench/pgbench/compare.sh runs both against one server and prints the
// ratios.
func BenchmarkPostgres(b *testing.B) {
	p := pgPool(b)
	store := pgTable(b, p, "bench_sluice", "gcra", "tokenbucket")
	var errs pgErrors
	impls := []struct {
		name string
		take taker
	}{
		{"sluice-gcra", sluicePG(b, store, gcra.New(), &errs)},
		{"sluice-tokenbucket", sluicePG(b, store, tokenbucket.New(), &errs)},
		{"naive-pgx", naivePG(b, p, gcra.New(), &errs)},
	}
	for _, ks := range []string{"hot", "100k"} {
		key := pgKeyChooser(ks == "hot")
		for _, conc := range []int{1, 8, 32} {
			for _, im := range impls {
				b.Run(fmt.Sprintf("keys=%s/conc=%d/impl=%s", ks, conc, im.name), func(b *testing.B) {
					runConcurrent(b, conc, im.take, key)
					errs.report(b)
				})
			}
		}
	}
}

// BenchmarkPostgresComposite compares one rule with three rules checked in
// one transaction.
func BenchmarkPostgresComposite(b *testing.B) {
	p := pgPool(b)
	s := pgTable(b, p, "bench_sluice")
	rules := []sluice.Rule{
		{Name: "ip", Algorithm: gcra.New(), Limit: pgOpen, Budget: benchBudget},
		{Name: "user", Algorithm: gcra.New(), Limit: pgOpen, Budget: benchBudget},
		{Name: "global", Algorithm: tokenbucket.New(), Limit: pgOpen, Budget: benchBudget},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	for _, n := range []int{1, 3} {
		c, err := sluice.NewComposite(rules[:n], sluice.WithStore(s))
		if err != nil {
			b.Fatal(err)
		}
		keys := []string{"1.2.3.4", "alice", "all"}[:n]
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.AllowN(ctx, 1, keys...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
