package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sluicehq/sluice/algorithms/catalog"
	"github.com/sluicehq/sluice/backends/pgstore"
	"github.com/sluicehq/sluice/conformance/e2e/testenv"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// TestReadyzProvesPostgresWrites checks /readyz on PostgreSQL: ready
// with a role that may write the store's table; not ready when its
// transactions are read-only, or when its grants let it lock a row (what
// a peek does) but not update it, where a peek still succeeds.
func TestReadyzProvesPostgresWrites(t *testing.T) {
	pg := testenv.Postgres(t)
	admin, err := pgxpool.New(t.Context(), pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)

	cfg := testConfig(t, backendRules)
	cfg.backend, cfg.postgresDSN = "postgres", pg.DSN
	rw := startServer(t, cfg) // migrates the table
	table := rw.store.(*pgstore.Store).Table()
	otherRows := func() (n int) {
		t.Helper()
		if err := admin.QueryRow(t.Context(), "SELECT count(*) FROM "+table+" WHERE namespace <> $1",
			[]byte(probeNamespace)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := otherRows()
	for range 3 {
		if got := readyStatus(t, rw); got != http.StatusOK {
			t.Fatalf("/readyz with a writable store: %d, want 200", got)
		}
	}
	if after := otherRows(); after != before {
		t.Fatalf("/readyz wrote outside its namespace: %d rows, then %d", before, after)
	}

	t.Run("read-only transactions", func(t *testing.T) {
		u, err := url.Parse(pg.DSN)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("default_transaction_read_only", "on")
		u.RawQuery = q.Encode()
		cfg := testConfig(t, backendRules)
		cfg.backend, cfg.postgresDSN, cfg.postgresMigrate = "postgres", u.String(), false
		srv := startServer(t, cfg)
		if got := readyStatus(t, srv); got != http.StatusServiceUnavailable {
			t.Fatalf("/readyz with read-only transactions: %d, want 503", got)
		}
	})

	t.Run("lock but no update grant", func(t *testing.T) {
		// UPDATE on expires_at alone allows SELECT … FOR UPDATE and the
		// seed, not the write of a decision's state.
		role := fmt.Sprintf("sluice_readyz_%d", time.Now().UnixNano())
		for _, sql := range []string{
			"CREATE ROLE " + role + " LOGIN PASSWORD 'readyz'",
			"GRANT SELECT, INSERT, UPDATE (expires_at) ON " + table + " TO " + role,
		} {
			if _, err := admin.Exec(t.Context(), sql); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { // after the server below has closed its pool
			for _, sql := range []string{"DROP OWNED BY " + role, "DROP ROLE " + role} {
				if _, err := admin.Exec(context.Background(), sql); err != nil {
					t.Errorf("%s: %v", sql, err)
				}
			}
		})
		u, err := url.Parse(pg.DSN)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword(role, "readyz")
		cfg := testConfig(t, backendRules)
		cfg.backend, cfg.postgresDSN, cfg.postgresMigrate = "postgres", u.String(), false
		srv := startServer(t, cfg)

		// The role can peek: a probe that peeks would call this ready.
		alg, _ := catalog.ByName("gcra")
		if _, err := srv.store.Apply(t.Context(), ratelimit.Check{Namespace: probeNamespace, Key: "peek",
			Algorithm: alg, Limit: probeLimit, Cost: 0}); err != nil {
			t.Fatalf("a peek as %s: %v (the role should be able to lock)", role, err)
		}
		if got := readyStatus(t, srv); got != http.StatusServiceUnavailable {
			t.Fatalf("/readyz without UPDATE on the state: %d, want 503", got)
		}
	})
}
