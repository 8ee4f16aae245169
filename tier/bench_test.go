package tier

import (
	"testing"

	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// BenchmarkApply measures a decision of one hot key served locally, over
// the memory store.
func BenchmarkApply(b *testing.B) {
	for _, mode := range []Mode{Lease, Sync} {
		b.Run("mode="+mode.String(), func(b *testing.B) {
			s, err := New(newBackingB(b), WithRule("r", Rule{Mode: mode}))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			c := ratelimit.Check{Namespace: "r", Key: "hot", Algorithm: gcra.New(), Limit: ratelimit.PerSecond(1 << 30), Cost: 1}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := s.Apply(b.Context(), c); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
