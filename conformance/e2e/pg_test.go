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

// TestPostgresStore runs the conformance suite on pgstore against the
// PostgreSQL from testenv: a table of its own, each store with its own pool
// (a separate pod). The store-down checks are left to pgstore's own tests,
// which stop and restart their child server: testenv's restarted process
// keeps a goroutine that the suite's leak check reports.
func TestPostgresStore(t *testing.T) {
	srv := testenv.Postgres(t)
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
		NewStore:   func(t *testing.T) ratelimit.Store { return open(t) },
	}
	storetest.Run(t, h)
}
