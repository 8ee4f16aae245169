package tier

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/redisslot"
)

// TestShardedAggregateExactConcurrentSafe: a key spread over 8 sub-keys
// with borrowing admits exactly its burst, in Exact and Lease mode, from
// several stores at once.
func TestShardedAggregateExactConcurrentSafe(t *testing.T) {
	for _, mode := range []Mode{Exact, Lease} {
		t.Run("mode="+mode.String(), func(t *testing.T) {
			b := newBacking(t, nil)
			l := ratelimit.Limit{Count: 10, Period: 1000 * time.Hour, Burst: 203} // not a multiple of 8
			newStore := func() *Store { return newTier(t, b, WithRule("r", Rule{Mode: mode, Shards: 8})) }
			if got := admitUnderContention(t, 3, newStore, 8, 40, check("hot", l)); got != l.Burst {
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
				if tag, ok := redisslot.HashTag(sk); ok {
					src = tag
				}
				slot := int(redisslot.TagSlot(src))
				if lo, hi := i*redisslot.Slots/n, (i+1)*redisslot.Slots/n; slot < lo || slot >= hi {
					t.Errorf("key %q: sub-key %d of %d in slot %d, outside [%d, %d)", key, i, n, slot, lo, hi)
				}
			}
		}
	}
}

// TestShardedRefusals: a composite naming a sharded rule and the
// operations without a single bucket are refused; a peek sums the
// sub-keys.
func TestShardedRefusals(t *testing.T) {
	b := newBacking(t, nil)
	s := newTier(t, b, WithRule("r", Rule{Mode: Lease, Shards: 4}))
	l := ratelimit.Limit{Count: 4, Period: 1000 * time.Hour, Burst: 40}
	for range 10 {
		if o, err := s.Apply(t.Context(), check("k", l)); err != nil || !o.Allowed {
			t.Fatal(o, err)
		}
	}
	peek := check("k", l)
	peek.Cost = 0
	o, err := s.Apply(t.Context(), peek)
	if err != nil || !o.Allowed || o.Remaining > 30 || o.Remaining < 1 {
		t.Fatalf("peek: %+v %v; want allowed with at most 30 left", o, err)
	}
	_, err = s.ApplyAll(t.Context(), []ratelimit.Check{check("k", l)}, make([]ratelimit.Outcome, 1))
	if !errors.Is(err, ratelimit.ErrUnsupported) {
		t.Fatalf("composite on a sharded rule: %v, want ErrUnsupported", err)
	}
	refund := check("k", l)
	refund.Op = ratelimit.OpRefund
	if _, err := s.Apply(t.Context(), refund); !errors.Is(err, ratelimit.ErrUnsupported) {
		t.Fatalf("refund on a sharded rule: %v, want ErrUnsupported", err)
	}
	// A limit with fewer units than shards is kept whole, composites too.
	small := ratelimit.Limit{Count: 1, Period: time.Hour, Burst: 3}
	if _, err := s.ApplyAll(t.Context(), []ratelimit.Check{check("k2", small)}, make([]ratelimit.Outcome, 1)); err != nil {
		t.Fatalf("composite under a limit kept whole: %v", err)
	}
}
