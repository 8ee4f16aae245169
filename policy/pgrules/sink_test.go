package pgrules

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/policy"
)

// gatedPool holds every Acquire until gate is closed, and counts them.
type gatedPool struct {
	Pool
	gate     chan struct{}
	acquires atomic.Int64
}

func (g *gatedPool) Acquire(ctx context.Context) (*pgxpool.Conn, error) {
	g.acquires.Add(1)
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Pool.Acquire(ctx)
}

// violationEngine returns an engine with a 1-per-minute rule per user and
// a Sink writing through a closed gate; queue 0 is the default queue size.
func violationEngine(t *testing.T, queue int) (*fixture, *gatedPool, *Sink, *policy.Engine) {
	t.Helper()
	f := newFixture(t, pgtest.DSN(t))
	f.insert(t, "descriptor, requests_per_unit, unit", `[{"key":"user"}]`, 1, "minute")
	gp := &gatedPool{Pool: f.pool, gate: make(chan struct{})}
	sink, err := NewSink(gp, f.opts...)
	if err != nil {
		t.Fatal(err)
	}
	opts := []policy.Option{policy.WithSink(sink)}
	if queue > 0 {
		opts = append(opts, policy.WithQueueSize(queue))
	}
	return f, gp, sink, f.engine(t, f.source(t), opts...)
}

func closeEngine(t *testing.T, e *policy.Engine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := e.Close(ctx); err != nil {
		t.Fatalf("engine Close: %v", err)
	}
}

func (f *fixture) violations(t *testing.T) int64 {
	t.Helper()
	var n int64
	if err := f.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+f.schema+`."RateLimitViolation"`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSinkBatches: violations are written in batches (far fewer COPYs than
// violations), all of them once the engine is closed, with their fields.
func TestSinkBatches(t *testing.T) {
	t.Parallel()
	f, gp, sink, e := violationEngine(t, 0)
	// 999 denials of u1 while the sink cannot write, one of a key that
	// PostgreSQL text cannot hold.
	if got := admitted(t, e, f.domain, desc("user", "u1"), 1000); got != 1 {
		t.Fatalf("%d admitted, want 1", got)
	}
	if got := admitted(t, e, f.domain, desc("user", "n\x00ul\xff"), 2); got != 1 {
		t.Fatalf("%d admitted, want 1", got)
	}
	close(gp.gate)
	closeEngine(t, e)
	if n, w, d := f.violations(t), sink.Written(), e.DroppedViolations(); n != 1000 || w != 1000 || d != 0 {
		t.Fatalf("%d rows, %d written, %d dropped; want 1000, 1000, 0", n, w, d)
	}
	// The engine hands at most 256 at once: the first batch, then full ones.
	if n := gp.acquires.Load(); n > 5 {
		t.Fatalf("%d connections for 1000 violations, want at most 5 batches", n)
	}
	var (
		rule, key, descriptor  string
		plan                   *string
		hits, count, remaining int64
		period                 time.Duration
		retryAfter             *time.Duration
		shadow, byPolicy, deny bool
	)
	err := f.pool.QueryRow(t.Context(), `SELECT rule, key, descriptor::text, plan, hits, limit_count,
		limit_period, remaining, retry_after, shadow, by_policy, denied FROM `+f.schema+`."RateLimitViolation"
		WHERE domain = $1 AND key = 'u1' ORDER BY id LIMIT 1`, f.domain).Scan(&rule, &key, &descriptor, &plan, &hits,
		&count, &period, &remaining, &retryAfter, &shadow, &byPolicy, &deny)
	if err != nil {
		t.Fatal(err)
	}
	if rule != f.domain+".user" || descriptor != `[{"key": "user", "value": "u1"}]` || plan != nil || hits != 1 ||
		count != 1 || period != time.Minute || remaining != 0 || retryAfter == nil || *retryAfter <= 0 || shadow || byPolicy || !deny {
		t.Fatalf("violation row: rule %q key %q descriptor %s plan %v hits %d limit %d/%s remaining %d retry_after %v "+
			"shadow %t by_policy %t denied %t", rule, key, descriptor, plan, hits, count, period, remaining, retryAfter,
			shadow, byPolicy, deny)
	}
	var n int
	if err := f.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+f.schema+`."RateLimitViolation" WHERE key = $1`,
		"n\uFFFDul\uFFFD").Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows for the key with NUL and invalid UTF-8 stored with U+FFFD: %d, %v; want 1", n, err)
	}
}

// TestSinkDrops: a sink that cannot keep up makes the engine drop and
// count violations, never wait; what was queued is written on Close.
func TestSinkDrops(t *testing.T) {
	t.Parallel()
	f, gp, sink, e := violationEngine(t, 10)
	// The sink is stuck for the whole loop: Decide must not wait for it.
	if got := admitted(t, e, f.domain, desc("user", "u1"), 501); got != 1 {
		t.Fatalf("%d admitted, want 1", got)
	}
	dropped := e.DroppedViolations()
	if dropped == 0 || dropped > 500-10 {
		t.Fatalf("%d of 500 violations dropped with a queue of 10 and a stuck sink", dropped)
	}
	close(gp.gate)
	closeEngine(t, e)
	if n, w := f.violations(t), sink.Written(); n != int64(w) || w+dropped != 500 {
		t.Fatalf("%d rows, %d written, %d dropped; want rows = written and written + dropped = 500", n, w, dropped)
	}
}
