package redisstore_test

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/backends/redisstore"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// hammerLongQuota runs 64 callers over the stores, calls each, on one key
// of a quota of count per 30 days, and fails unless exactly count are
// admitted with no error. The refill of such a quota takes longer than the
// span native.lua computes exactly (2^51 ns, about 26 days), so every
// in-repo algorithm takes the generic read / compare-and-set path.
func hammerLongQuota(t *testing.T, stores []*redisstore.Store, count int64, calls int) {
	t.Helper()
	quota := ratelimit.Every(30*24*time.Hour, count)
	for _, alg := range testAlgorithms() {
		t.Run("algo="+alg.Name(), func(t *testing.T) {
			check := ratelimit.Check{Namespace: "month-" + alg.Name(), Key: "hot", Algorithm: alg, Limit: quota, Cost: 1}
			var allowed, errs atomic.Int64
			var wg sync.WaitGroup
			for g := range 64 {
				wg.Go(func() {
					st := stores[g%len(stores)]
					for range calls {
						o, err := st.Apply(t.Context(), check)
						switch {
						case err != nil:
							if errs.Add(1) < 4 {
								t.Log(err)
							}
						case o.Allowed:
							allowed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if allowed.Load() != count || errs.Load() != 0 {
				t.Fatalf("allowed %d (want %d), errors %d (want 0)", allowed.Load(), count, errs.Load())
			}
		})
	}
}

// TestLongQuotaConcurrentSafe: 64 callers on a 30-day quota, on one store,
// on 8 stores with their own clients (8 gateway pods) and on 64 (one
// caller each), with the default CAS attempts: exact count, no error. The
// 64 stores make fewer calls: each call there waits for its turn among 64
// compare-and-set writers.
func TestLongQuotaConcurrentSafe(t *testing.T) {
	srv := startServer(t)
	for _, n := range []int{1, 8, 64} {
		t.Run("stores="+strconv.Itoa(n), func(t *testing.T) {
			prefix := randomPrefix(t)
			stores := make([]*redisstore.Store, n)
			for i := range stores {
				st, err := redisstore.New(newClient(t, srv.addr()), redisstore.WithPrefix(prefix))
				if err != nil {
					t.Fatal(err)
				}
				stores[i] = st
			}
			if n == 64 {
				hammerLongQuota(t, stores, 200, 5)
			} else {
				hammerLongQuota(t, stores, 2000, 50)
			}
		})
	}
}

// TestClusterLongQuotaConcurrentSafe is TestLongQuotaConcurrentSafe on a
// Redis Cluster.
func TestClusterLongQuotaConcurrentSafe(t *testing.T) {
	srv, _ := startCluster(t)
	for _, n := range []int{1, 8, 64} {
		t.Run("stores="+strconv.Itoa(n), func(t *testing.T) {
			prefix := randomPrefix(t)
			stores := make([]*redisstore.Store, n)
			for i := range stores {
				st, err := redisstore.New(newClusterClient(t, srv.addr()), redisstore.WithPrefix(prefix))
				if err != nil {
					t.Fatal(err)
				}
				stores[i] = st
			}
			if n == 64 {
				hammerLongQuota(t, stores, 200, 5)
			} else {
				hammerLongQuota(t, stores, 2000, 50)
			}
		})
	}
}
