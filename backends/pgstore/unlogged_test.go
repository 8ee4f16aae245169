package pgstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/pgtest"
)

// TestUnloggedAfterImmediateStop stops a dedicated server like a crash
// (pg_ctl stop -m immediate) and restarts it: the UNLOGGED table comes back
// empty, so every key is fully available again, while a logged table keeps
// its state. While the server is down, calls fail with ErrUnavailable.
func TestUnloggedAfterImmediateStop(t *testing.T) {
	srv := pgtest.New(t)
	connect := func() *pgxpool.Pool {
		pool, err := pgxpool.New(t.Context(), srv.DSN())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return pool
	}
	pool := connect()
	unlogged := newStoreOn(t, pool, WithTable("unlogged_state"), WithUnlogged())
	logged := newStoreOn(t, pool, WithTable("logged_state"))
	var persistence string
	if err := pool.QueryRow(t.Context(), "SELECT relpersistence::text FROM pg_class WHERE oid = to_regclass($1)", unlogged.Table()).Scan(&persistence); err != nil || persistence != "u" {
		t.Fatalf("relpersistence of %s = %q, %v; want u", unlogged.Table(), persistence, err)
	}
	for _, s := range []*Store{unlogged, logged} {
		for range 3 {
			if _, err := s.Apply(t.Context(), take("k", 5, 1)); err != nil {
				t.Fatal(err)
			}
		}
	}

	srv.Crash()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	_, err := unlogged.Apply(ctx, take("k", 5, 1))
	cancel()
	if !errors.Is(err, ratelimit.ErrUnavailable) {
		t.Fatalf("Apply with the server down = %v, want ErrUnavailable", err)
	}
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}

	pool = connect()
	unlogged, logged = newStoreOn(t, pool, WithTable("unlogged_state"), WithUnlogged()), newStoreOn(t, pool, WithTable("logged_state"))
	var rows int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM "+unlogged.Table()).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("UNLOGGED table after an immediate stop has %d rows (%v), want 0", rows, err)
	}
	if got := remaining(t, unlogged, "k", 5); got != 5 {
		t.Fatalf("UNLOGGED key after restart: remaining %d, want 5 (fully available)", got)
	}
	if got := remaining(t, logged, "k", 5); got != 2 {
		t.Fatalf("logged key after restart: remaining %d, want 2 (state kept)", got)
	}
}
