package pgstore

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// writeCounter counts the writes on the connections it dials. The store
// (and pgx) write each pipeline, batch or query with one Write, then wait
// for the reply, so one Write is one network round trip.
type writeCounter struct{ writes atomic.Int64 }

func (c *writeCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, c: c}, nil
}

func (c *writeCounter) take() int64 { return c.writes.Swap(0) }

type countingConn struct {
	net.Conn
	c *writeCounter
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.c.writes.Add(1)
	return c.Conn.Write(b)
}

// TestRoundTrips checks the round trips docs/postgres.md states,
// counted as writes on the socket: one to prepare the decision path's
// statements on a new connection, then 2 per decision on existing rows
// whether it writes or not and for a composite too, one more when a row
// is missing and must be seeded, 1 per Reset and per sweep batch.
func TestRoundTrips(t *testing.T) {
	var counter writeCounter
	pool := newPool(t, func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.ConnConfig.DialFunc = counter.dial
	})
	if err := pool.Ping(t.Context()); err != nil { // connect outside the count
		t.Fatal(err)
	}
	s := newStoreOn(t, pool, WithTable(randomName("t_")))
	key := randomName("rt-")
	composite := []ratelimit.Check{take(key+"a", 1, 1), take(key+"b", 1, 1), take(key+"c", 1, 1)}
	out := make([]ratelimit.Outcome, len(composite))
	counter.take()
	if _, err := s.Apply(t.Context(), take(randomName("first-"), 1, 1)); err != nil {
		t.Fatal(err)
	}
	if got := counter.take(); got != 4 {
		t.Errorf("first decision on a connection, new key: %d round trips, want 4 (prepare, read, seed, write)", got)
	}
	// Warm up: let pgx prepare the statements of Reset and Sweep.
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
		{"allowed take of a new key (seeds, writes)", func() error { _, err := s.Apply(t.Context(), take(key, 2, 1)); return err }, 3},
		{"allowed take (writes)", func() error { _, err := s.Apply(t.Context(), take(key, 2, 1)); return err }, 2},
		{"denied take (no write)", func() error { _, err := s.Apply(t.Context(), take(key, 2, 1)); return err }, 2},
		{"peek of a new key", func() error { _, err := s.Apply(t.Context(), take(randomName("new-"), 1, 0)); return err }, 3},
		{"composite of 3 new keys, allowed", func() error { _, err := s.ApplyAll(t.Context(), composite, out); return err }, 3},
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
