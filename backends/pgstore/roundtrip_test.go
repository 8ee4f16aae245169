package pgstore

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// sendCounter counts what a connection sends: each batch and each single
// query is one round trip once its statements are prepared.
type sendCounter struct{ batches, queries atomic.Int64 }

func (c *sendCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.queries.Add(1)
	return ctx
}

func (*sendCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *sendCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.batches.Add(1)
	return ctx
}

func (*sendCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (*sendCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (c *sendCounter) take() int64 { return c.batches.Swap(0) + c.queries.Swap(0) }

// TestRoundTrips checks the round trips the package documentation states,
// on one warmed-up connection (statements already prepared): 2 per
// decision whether it writes or not and for a composite too, 1 per Reset
// and per sweep batch.
func TestRoundTrips(t *testing.T) {
	var counter sendCounter
	pool := newPool(t, func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.ConnConfig.Tracer = &counter
	})
	s := newStoreOn(t, pool, WithTable(randomName("t_")))
	key := randomName("rt-")
	composite := []ratelimit.Check{take(key+"a", 1, 1), take(key+"b", 1, 1), take(key+"c", 1, 1)}
	out := make([]ratelimit.Outcome, len(composite))
	// Warm up: prepare every statement on the connection.
	for range 2 {
		if _, err := s.Apply(t.Context(), take(randomName("warm-"), 1, 1)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ApplyAll(t.Context(), composite, out); err != nil {
			t.Fatal(err)
		}
		if err := s.Reset(t.Context(), "ns", "warm"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Sweep(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	for _, err := range []error{s.Reset(t.Context(), "ns", key+"a"), s.Reset(t.Context(), "ns", key+"b"), s.Reset(t.Context(), "ns", key+"c")} {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		call func() error
		want int64
	}{
		{"allowed take (writes)", func() error { _, err := s.Apply(t.Context(), take(key, 1, 1)); return err }, 2},
		{"denied take (no write)", func() error { _, err := s.Apply(t.Context(), take(key, 1, 1)); return err }, 2},
		{"peek of a new key", func() error { _, err := s.Apply(t.Context(), take(randomName("new-"), 1, 0)); return err }, 2},
		{"composite of 3, allowed", func() error { _, err := s.ApplyAll(t.Context(), composite, out); return err }, 2},
		{"composite of 3, denied", func() error { _, err := s.ApplyAll(t.Context(), composite, out); return err }, 2},
		{"reset", func() error { return s.Reset(t.Context(), "ns", key) }, 1},
		{"sweep with nothing to sweep", func() error { _, err := s.Sweep(t.Context()); return err }, 1},
	} {
		counter.take()
		if err := tc.call(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := counter.take(); got != tc.want {
			t.Errorf("%s: %d round trips, want %d", tc.name, got, tc.want)
		}
	}
}
