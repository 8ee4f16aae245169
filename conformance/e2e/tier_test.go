package e2e

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/conformance/e2e/testenv"
	"github.com/sluicehq/sluice/conformance/storetest"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/tier"
)

// newTierRedis returns a tier Store over a redisstore with its own client
// (a separate pod) on srv, under prefix.
func newTierRedis(t testing.TB, srv *testenv.Server, prefix string, opts ...tier.Option) *tier.Store {
	t.Helper()
	ts, _ := newTierRedisClient(t, srv, prefix, opts...)
	return ts
}

// newTierRedisClient is newTierRedis that also returns the client, which
// a test may close to make the store's process look crashed.
func newTierRedisClient(t testing.TB, srv *testenv.Server, prefix string, opts ...tier.Option) (*tier.Store, *redis.Client) {
	t.Helper()
	st, c := newRedisStore(t, srv, prefix)
	ts, err := tier.New(st, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ts, c
}

// TestTierExactStore runs the conformance suite on the tier decorator in
// its pass-through configuration (every rule Exact) over redisstore: the
// decorator must then be indistinguishable from the store it wraps,
// store-down checks included.
func TestTierExactStore(t *testing.T) {
	srv := testenv.NewRedis(t)
	prefix := redisPrefix(t)
	storetest.Run(t, privateHarness(srv, func(t *testing.T) ratelimit.Store {
		// A probe interval shorter than the suite's recovery poll.
		return newTierRedis(t, srv, prefix, tier.WithProbeInterval(time.Millisecond))
	}))
}

// TestTierLeaseStore runs the conformance suite on the decorator with
// every rule in Lease mode, declared approximate: decisions come from
// leases, so Remaining is the node's estimate and a write becomes visible
// to other clients when their leases expire (the suite's settle time);
// admission under contention may fall short by the units leases still
// hold when the test stops asking, and never exceeds the exact count.
func TestTierLeaseStore(t *testing.T) {
	srv := testenv.NewRedis(t)
	prefix := redisPrefix(t)
	h := privateHarness(srv, func(t *testing.T) ratelimit.Store {
		return newTierRedis(t, srv, prefix, tier.WithProbeInterval(time.Millisecond),
			tier.WithDefaultRule(tier.Rule{Mode: tier.Lease, LeaseTTL: time.Second}))
	})
	h.Approximate = func(limit ratelimit.Limit, stores int) storetest.Bound {
		return storetest.Bound{Under: int64(stores) * limit.Burst / 4}
	}
	storetest.Run(t, h)
}

// TestTierSyncStore runs the conformance suite on the decorator with
// every rule in Sync mode, declared approximate with the bound of
// docs/tier.md for a refill-free limit: (W−1)·B + N over, W at most 2.
// Without the store-down checks: a view keeps deciding from its slice
// while the server is down, by design, where the suite wants an error;
// TestTierRedisKilled checks that behaviour instead.
func TestTierSyncStore(t *testing.T) {
	srv := testenv.NewRedis(t)
	prefix := redisPrefix(t)
	storetest.Run(t, storetest.Harness{
		Algorithms: algorithms(),
		NewStore: func(t *testing.T) ratelimit.Store {
			return newTierRedis(t, srv, prefix, tier.WithProbeInterval(time.Millisecond),
				tier.WithDefaultRule(tier.Rule{Mode: tier.Sync, SyncInterval: 10 * time.Millisecond}))
		},
		Approximate: func(limit ratelimit.Limit, stores int) storetest.Bound {
			return storetest.Bound{Under: limit.Burst / 4, Over: limit.Burst + int64(stores)}
		},
	})
}
