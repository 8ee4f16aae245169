package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/backends/pgstore"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// pgPool connects to SLUICE_BENCH_POSTGRES_DSN or skips.
func pgPool(b *testing.B) *pgxpool.Pool {
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

func sluicePG(b *testing.B, p *pgxpool.Pool, alg ratelimit.Algorithm) taker {
	s, err := pgstore.New(p, pgstore.WithTable("bench_sluice"))
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	lim, err := ratelimit.New(ratelimit.Rule{Name: "b", Algorithm: alg, Limit: pgOpen}, ratelimit.WithStore(s))
	if err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context, key string) bool {
		d, err := lim.Allow(ctx, key)
		if err != nil {
			b.Error(err)
		}
		return d.Allowed
	}
}

// naivePG is the hand-written token bucket most teams start with: the same
// transaction as pgstore (seed, lock, read the clock, write, commit) but
// every statement its own round trip.
func naivePG(b *testing.B, p *pgxpool.Pool) taker {
	ctx := context.Background()
	if _, err := p.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_naive (key text PRIMARY KEY, tokens bigint NOT NULL, ts bigint NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	rate, burst := pgOpen.Count, pgOpen.Burst
	period := int64(pgOpen.Period)
	return func(ctx context.Context, key string) bool {
		allowed := false
		err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO bench_naive VALUES ($1, $2, 0) ON CONFLICT DO NOTHING`, key, burst); err != nil {
				return err
			}
			var tokens, ts int64
			if err := tx.QueryRow(ctx, `SELECT tokens, ts FROM bench_naive WHERE key = $1 FOR UPDATE`, key).Scan(&tokens, &ts); err != nil {
				return err
			}
			var now int64
			if err := tx.QueryRow(ctx, `SELECT (extract(epoch from clock_timestamp()) * 1e9)::bigint`).Scan(&now); err != nil {
				return err
			}
			if now > ts {
				tokens = min(burst, tokens+ratelimit.MulDivFloor(now-ts, rate, period))
			}
			if tokens >= 1 {
				tokens--
				allowed = true
			}
			_, err := tx.Exec(ctx, `UPDATE bench_naive SET tokens = $2, ts = $3 WHERE key = $1`, key, tokens, now)
			return err
		})
		if err != nil && !errors.Is(err, context.Canceled) {
			b.Error(err)
		}
		return allowed
	}
}

// BenchmarkPostgres compares pgstore with the naive transaction at
// concurrency 1, 8 and 32, on one hot key and on 100k random keys. The
// pgbench ceiling of the same work is bench/pgbench/run.sh.
func BenchmarkPostgres(b *testing.B) {
	p := pgPool(b)
	keys := makeKeys(100_000)
	impls := []struct {
		name string
		make func() taker
	}{
		{"sluice-gcra", func() taker { return sluicePG(b, p, gcra.New()) }},
		{"sluice-tokenbucket", func() taker { return sluicePG(b, p, tokenbucket.New()) }},
		{"naive-pgx", func() taker { return naivePG(b, p) }},
	}
	for _, ks := range []string{"hot", "100k"} {
		for _, conc := range []int{1, 8, 32} {
			for _, im := range impls {
				take := im.make()
				b.Run(fmt.Sprintf("keys=%s/conc=%d/impl=%s", ks, conc, im.name), func(b *testing.B) {
					runConcurrent(b, conc, take, keyChooser("pg:", ks == "hot", keys))
				})
			}
		}
	}
}

// BenchmarkPostgresComposite compares one rule with three rules checked in
// one transaction.
func BenchmarkPostgresComposite(b *testing.B) {
	p := pgPool(b)
	s, err := pgstore.New(p, pgstore.WithTable("bench_sluice"))
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	rules := []ratelimit.Rule{
		{Name: "ip", Algorithm: gcra.New(), Limit: pgOpen},
		{Name: "user", Algorithm: gcra.New(), Limit: pgOpen},
		{Name: "global", Algorithm: tokenbucket.New(), Limit: pgOpen},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	for _, n := range []int{1, 3} {
		c, err := ratelimit.NewComposite(rules[:n], ratelimit.WithStore(s))
		if err != nil {
			b.Fatal(err)
		}
		keys := []string{"1.2.3.4", "alice", "all"}[:n]
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Allow(ctx, keys...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
