package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sluicehq/sluice/backends/pgstore"
	"github.com/sluicehq/sluice/conformance/e2e/testenv"
	"github.com/sluicehq/sluice/conformance/storetest"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// pgOwned is a pgstore.Store that closes its own pool, so that the suite's
// goroutine-leak check sees each store fully released.
type pgOwned struct {
	*pgstore.Store
	pool *pgxpool.Pool
}

// Close closes the store, then its pool.
func (s pgOwned) Close() error {
	err := s.Store.Close()
	s.pool.Close()
	return err
}

// TestPostgresStore runs the conformance suite on pgstore against a
// PostgreSQL private to the test: a table of its own, each store with its
// own pool (a separate pod). The server is private so that the store-down
// checks, which crash and restart it, disturb no other test.
func TestPostgresStore(t *testing.T) {
	srv := testenv.NewPostgres(t)
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	table := "e2e_" + hex.EncodeToString(b[:])
	open := func(t *testing.T) pgOwned {
		pool, err := pgxpool.New(t.Context(), srv.DSN)
		if err != nil {
			t.Fatal(err)
		}
		st, err := pgstore.New(pool, pgstore.WithTable(table))
		if err != nil {
			pool.Close()
			t.Fatal(err)
		}
		return pgOwned{st, pool}
	}
	setup := open(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := setup.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := setup.Close(); err != nil {
		t.Fatal(err)
	}
	h := storetest.Harness{
		Algorithms: algorithms(),
		Stop:       func(t *testing.T) { srv.Stop(t) },
		Start:      func(t *testing.T) { srv.Start(t) },
		NewStore:   func(t *testing.T) ratelimit.Store { return open(t) },
	}
	storetest.Run(t, h)
}
