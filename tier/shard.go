package tier

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/redisslot"
)

// Hot-key sharding spreads the state of one key over n sub-keys of the
// backing store, sub-key i holding the share shareOf(limit, i, n) of the
// limit: the shares sum to the limit's Count and Burst. A take tries one
// sub-key chosen at random and borrows from the others in turn when it is
// refused, so the key admits what one bucket would, up to fragmentation
// (docs/tier.md).

// shareOf returns sub-key i's share of l over n sub-keys: Count and Burst
// divided by n, the remainders going to the first sub-keys.
func shareOf(l ratelimit.Limit, i, n int) ratelimit.Limit {
	n64, i64 := int64(n), int64(i)
	l.Count = l.Count/n64 + b2i(i64 < l.Count%n64)
	l.Burst = l.Burst/n64 + b2i(i64 < l.Burst%n64)
	return l
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func b2iInt(b bool) int { return int(b2i(b)) }

// subKeys is the sub-keys of one key, computed once.
type subKeys struct {
	mu      sync.Mutex
	keys    []string
	lastUse int64
}

// subKey returns the key of sub-key i of key over n sub-keys. It is key
// followed by a NUL byte and a decimal suffix, chosen so that with
// redisstore's default hash tags sub-key i falls in the i-th n-th of the
// 16384 Redis Cluster slots: on a cluster whose masters own contiguous
// slot ranges, the sub-keys are spread over the masters. A key with a
// hash tag of its own ("{tenant}:ip") has the tag widened instead, since
// redisstore hashes only the tag: "{tenant\x00s}{tenant}:ip". The slots
// come from internal/redisslot, which redisstore writes its keys with
// (docs/redis.md "Key layout"); TestSubKeySlots checks the ranges, and
// conformance/e2e's TestTierShardedCluster checks them with CLUSTER
// KEYSLOT on a real cluster.
func subKey(key string, i, n int) string {
	lo, hi := i*redisslot.Slots/n, (i+1)*redisslot.Slots/n
	tag, tagged := redisslot.HashTag(key)
	var first string
	for s := 0; ; s++ {
		suffix := "\x00" + strconv.Itoa(s)
		var candidate, source string
		if tagged {
			source = tag + suffix
			candidate = "{" + source + "}" + key
		} else {
			candidate = key + suffix
			source = candidate
		}
		if s == 0 {
			first = candidate
		}
		if slot := int(redisslot.TagSlot(source)); slot >= lo && slot < hi {
			return candidate
		}
		if s > 64*n {
			return first // no such suffix in reach: any distinct sub-key will do
		}
	}
}

// subKeysOf returns the n sub-keys of key in namespace, cached.
func (s *Store) subKeysOf(namespace, key string, n int, now int64) []string {
	sk := s.subkeys.get(stateKey{namespace, key}, func() *subKeys { return &subKeys{} })
	sk.mu.Lock()
	defer sk.mu.Unlock()
	sk.lastUse = now
	if len(sk.keys) != n {
		sk.keys = make([]string, n)
		for i := range sk.keys {
			sk.keys[i] = subKey(key, i, n)
		}
	}
	return sk.keys
}

// sharded reports whether checks under limit in rule r's namespace are
// spread over sub-keys: a limit with fewer units than shards is kept
// whole.
func sharded(r *Rule, l ratelimit.Limit) bool {
	return r.Shards > 1 && l.Count >= int64(r.Shards) && l.Burst >= int64(r.Shards)
}

// applySharded decides c on the sub-keys of its key: a take borrows from
// sub-key to sub-key, a peek sums them; reservations, refunds and charges
// are refused (ErrUnsupported), having no single bucket to go to.
func (s *Store) applySharded(ctx context.Context, r *Rule, c ratelimit.Check) (ratelimit.Outcome, error) {
	n := r.Shards
	keys := s.subKeysOf(c.Namespace, c.Key, n, s.now())
	switch {
	case c.Op != ratelimit.OpTake:
		return ratelimit.Outcome{}, fmt.Errorf("%w: tier: %s on rule %q, whose keys are sharded", ratelimit.ErrUnsupported, c.Op, c.Namespace)
	case c.Cost == 0:
		return s.peekSharded(ctx, c, keys)
	case c.Cost > c.Limit.Burst:
		return ratelimit.Outcome{RetryAfter: ratelimit.Never}, nil
	}
	start := rand.IntN(n)
	var (
		denial   ratelimit.Outcome
		denied   bool
		lastErr  error
		possible bool
	)
	for j := range n {
		i := (start + j) % n
		sub := c
		sub.Key, sub.Limit = keys[i], shareOf(c.Limit, i, n)
		if sub.Cost > sub.Limit.Burst {
			continue // this share can never hold the cost
		}
		possible = true
		o, err := s.applyOne(ctx, r, sub, i)
		if err != nil {
			lastErr = err
			if ctx.Err() != nil {
				break
			}
			continue // borrow from the next sub-key
		}
		if o.Allowed {
			return o, nil
		}
		if !denied || o.RetryAfter < denial.RetryAfter {
			denial, denied = o, true
		}
	}
	switch {
	case denied:
		denial.Remaining = 0
		return denial, nil
	case !possible:
		// The cost exceeds every share: no sub-key can ever admit it.
		return ratelimit.Outcome{RetryAfter: ratelimit.Never}, nil
	}
	return ratelimit.Outcome{}, lastErr
}

// peekSharded peeks every sub-key: Remaining is their sum, Allowed
// whether one of them would admit one unit.
func (s *Store) peekSharded(ctx context.Context, c ratelimit.Check, keys []string) (ratelimit.Outcome, error) {
	var sum ratelimit.Outcome
	sum.RetryAfter = ratelimit.Never
	for i, k := range keys {
		sub := c
		sub.Key, sub.Limit = k, shareOf(c.Limit, i, len(keys))
		o, err := s.applyBacking(ctx, sub, i)
		if err != nil {
			return ratelimit.Outcome{}, err
		}
		sum.Allowed = sum.Allowed || o.Allowed
		sum.Remaining += o.Remaining
		sum.RetryAfter = min(sum.RetryAfter, o.RetryAfter)
		sum.ResetAfter = max(sum.ResetAfter, o.ResetAfter)
	}
	if sum.Allowed {
		sum.RetryAfter = 0
	}
	return sum, nil
}

// applyOne decides c on one (sub-)key by the rule's mode.
func (s *Store) applyOne(ctx context.Context, r *Rule, c ratelimit.Check, shard int) (ratelimit.Outcome, error) {
	if r.Mode == Lease && leaseable(c.Algorithm) {
		return s.applyLease(ctx, r, c, shard)
	}
	return s.applyBacking(ctx, c, shard)
}

// sweepSubKeys drops the sub-keys of keys idle for a minute.
func (s *Store) sweepSubKeys(now int64) {
	s.subkeys.each(func(_ stateKey, sk *subKeys) bool {
		sk.mu.Lock()
		defer sk.mu.Unlock()
		return now-sk.lastUse < int64(time.Minute)
	})
}
