package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/backends/pgstore"
	"github.com/sluicehq/sluice/backends/redisstore"
	"github.com/sluicehq/sluice/conformance/e2e/testenv"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/policy/policytest"
)

// patient gives a store a 2 s default budget: on a loaded test machine
// the 5 ms default would let the failure policy answer some calls and
// blur the exact counts the policy scenarios check.
type patient struct{ ratelimit.Store }

func (patient) DefaultBudget() time.Duration { return 2 * time.Second }

// TestPolicyRedis runs the policy scenarios (envoy configurations, the
// seeds' YAML, plans, a reload under 64 callers) on Redis.
func TestPolicyRedis(t *testing.T) {
	srv := testenv.Redis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 64})
	t.Cleanup(func() { _ = c.Close() })
	policytest.Run(t, func(t *testing.T) ratelimit.Store {
		st, err := redisstore.New(c, redisstore.WithPrefix(redisPrefix(t)))
		if err != nil {
			t.Fatal(err)
		}
		return patient{st}
	})
}

// TestPolicyPostgres runs the policy scenarios on PostgreSQL, each in a
// table of its own.
func TestPolicyPostgres(t *testing.T) {
	srv := testenv.Postgres(t)
	pool, err := pgxpool.New(t.Context(), srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	policytest.Run(t, func(t *testing.T) ratelimit.Store {
		table := "policy_" + redisPrefix(t)[3:15]
		st, err := pgstore.New(pool, pgstore.WithTable(table))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := st.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return patient{st}
	})
}
