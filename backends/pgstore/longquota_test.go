package pgstore

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms/catalog"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// TestLongQuotaConcurrentSafe: 64 callers over 4 stores with their own
// pools (4 gateway pods) on one key of a 30-day and of a 1-year quota,
// for every in-repo algorithm: exactly the quota admitted, no error.
// PostgreSQL decides in Go under a row lock, so the length of the limit
// changes nothing; this test keeps it so.
func TestLongQuotaConcurrentSafe(t *testing.T) {
	table := randomName("t_")
	stores := make([]*Store, 4)
	for i := range stores {
		stores[i] = newStoreOn(t, newPool(t, nil), WithTable(table))
	}
	for _, period := range []time.Duration{30 * 24 * time.Hour, 365 * 24 * time.Hour} {
		for _, alg := range append([]ratelimit.Algorithm{windowAlg{}}, catalog.All()...) {
			t.Run("period="+period.String()+"/algo="+alg.Name(), func(t *testing.T) {
				const quota = 300
				check := ratelimit.Check{Namespace: period.String() + alg.Name(), Key: "hot", Algorithm: alg, Limit: ratelimit.Every(period, quota), Cost: 1}
				var allowed, errs atomic.Int64
				var wg sync.WaitGroup
				for g := range 64 {
					wg.Go(func() {
						for range 8 {
							o, err := stores[g%len(stores)].Apply(t.Context(), check)
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
				if allowed.Load() != quota || errs.Load() != 0 {
					t.Fatalf("allowed %d (want %d), errors %d (want 0)", allowed.Load(), quota, errs.Load())
				}
			})
		}
	}
}
