package e2e

import (
	"context"
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

// openPgStore returns a pgstore using table on a pool of its own (a
// separate pod) over dsn.
func openPgStore(t *testing.T, dsn, table string) pgOwned {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), dsn)
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

// TestPostgresStore runs the conformance suite on pgstore against a
// PostgreSQL private to the test: a table of its own, each store with its
// own pool (a separate pod). The server is private so that the store-down
// checks, which crash and restart it, disturb no other test.
func TestPostgresStore(t *testing.T) {
	srv := testenv.NewPostgres(t)
	table := uniqueName(t, "e2e_")
	open := func(t *testing.T) pgOwned { return openPgStore(t, srv.DSN, table) }
	setup := open(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := setup.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := setup.Close(); err != nil {
		t.Fatal(err)
	}
	storetest.Run(t, privateHarness(srv, func(t *testing.T) ratelimit.Store { return open(t) }))
}
