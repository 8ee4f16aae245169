package tier

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// TestShardedAggregateExactConcurrentSafe: a key spread over 8 sub-keys
// with borrowing admits exactly its burst, in Exact and Lease mode, from
// several stores at once.
func TestShardedAggregateExactConcurrentSafe(t *testing.T) {
	for _, mode := range []Mode{Exact, Lease} {
		t.Run("mode="+mode.String(), func(t *testing.T) {
			b := newBacking(t, nil)
			l := ratelimit.Limit{Count: 10, Period: 1000 * time.Hour, Burst: 203} // not a multiple of 8
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range 3 {
				s := newTier(t, b, WithRule("r", Rule{Mode: mode, Shards: 8}))
				for range 8 {
					wg.Go(func() {
						for range 40 {
							o, err := s.Apply(t.Context(), check("hot", l))
							if err != nil {
								t.Error(err)
								return
							}
							if o.Allowed {
								admitted.Add(1)
							}
						}
					})
				}
			}
			wg.Wait()
			if got := admitted.Load(); got != l.Burst {
				t.Fatalf("admitted %d over 8 sub-keys, want exactly %d", got, l.Burst)
			}
			// Every unit was taken from a sub-key, none from the key itself.
			if got := b.level(t, check("hot", l)); got != l.Burst {
				t.Fatalf("the unsharded key was used: level %d", got)
			}
		})
	}
}

func TestShareOfSums(t *testing.T) {
	l := ratelimit.Limit{Count: 1003, Period: time.Second, Burst: 17}
	var count, burst int64
	for i := range 8 {
		s := shareOf(l, i, 8)
		count += s.Count
		burst += s.Burst
	}
	if count != l.Count || burst != l.Burst {
		t.Fatalf("shares sum to %d/%d, want %d/%d", count, burst, l.Count, l.Burst)
	}
}

// TestSubKeySlots: sub-key i of n lands in the i-th n-th of the Redis
// Cluster slots, for plain keys and keys with a hash tag, and sub-keys
// are distinct.
func TestSubKeySlots(t *testing.T) {
	for _, key := range []string{"hot", "{tenant7}:ip:10.0.0.1", "a{b{c}d", "{}x", "\x00"} {
		for _, n := range []int{2, 3, 8, 64} {
			seen := map[string]bool{}
			for i := range n {
				sk := subKey(key, i, n)
				if seen[sk] {
					t.Fatalf("key %q: sub-key %d of %d repeats %q", key, i, n, sk)
				}
				seen[sk] = true
				src := sk
				if tag, ok := braceTag(sk); ok {
					src = tag
				}
				slot := int(redisSlot(src))
				if lo, hi := i*redisSlots/n, (i+1)*redisSlots/n; slot < lo || slot >= hi {
					t.Errorf("key %q: sub-key %d of %d in slot %d, outside [%d, %d)", key, i, n, slot, lo, hi)
				}
			}
		}
	}
}
