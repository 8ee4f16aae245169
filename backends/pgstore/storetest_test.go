package pgstore

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/algorithms/catalog"
	"github.com/sluicehq/sluice/conformance/storetest"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/pgtest"
)

// ownedStore is a Store that closes its own pool, so that the suite's
// goroutine-leak check sees every store fully released.
type ownedStore struct {
	*Store
	pool *pgxpool.Pool
}

func (o ownedStore) Close() error {
	err := o.Store.Close()
	o.pool.Close()
	return err
}

// TestStoretest runs the conformance suite against PostgreSQL, with the
// server's clock and with an injected clock (exact outcomes and TTLs), the
// store-down checks stopping and restarting the child server.
func TestStoretest(t *testing.T) {
	dsn := pgtest.DSN(t)
	for _, tc := range []struct {
		name  string
		clock bool
	}{
		{"clock=server", false},
		{"clock=injected", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := randomName("t_")
			newStoreOn(t, newPool(t, nil), WithTable(table)) // creates the table
			h := storetest.Harness{Algorithms: catalog.All()}
			if srv := pgtest.Shared(); srv != nil {
				h.Stop = func(t *testing.T) { srv.Stop() }
				h.Start = func(t *testing.T) {
					if err := srv.Start(t.Context()); err != nil {
						t.Fatal(err)
					}
				}
			}
			if tc.clock {
				h.Clock = storetest.NewClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
			}
			h.NewStore = func(t *testing.T) ratelimit.Store {
				pool, err := pgxpool.New(t.Context(), dsn)
				if err != nil {
					t.Fatal(err)
				}
				s, err := New(pool, WithTable(table))
				if err != nil {
					pool.Close()
					t.Fatal(err)
				}
				if h.Clock != nil {
					s.testClock = h.Clock
				}
				return ownedStore{s, pool}
			}
			storetest.Run(t, h)
		})
	}
}
