package tier

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// leaseable reports whether alg can take part in Lease mode: unused units
// of a lease must go back to the backing store (ratelimit.Refunder).
// Other algorithms are passed through exactly.
func leaseable(alg ratelimit.Algorithm) bool {
	_, ok := alg.(ratelimit.Refunder)
	return ok
}

// leaseState is one key's lease: units taken from the backing store and
// not yet spent or refunded.
type leaseState struct {
	mu      sync.Mutex
	dead    bool  // removed from the table; callers fetch a new state
	tokens  int64 // unspent units of the current lease
	leased  int64 // size of the current lease, 0 before the first
	takenAt int64 // local ns the current lease was taken
	expires int64 // local ns from which unspent units are refunded
	// remaining is the backing store's Remaining after the last take: the
	// global level the next lease is sized from; -1 before the first.
	remaining int64
	resetAt   int64 // local ns the backing store said the key refills by
	// A denial of the backing store holds for deniedCost and more units
	// until deniedUntil: RetryAfter is never early, so asking again sooner
	// would be denied too.
	deniedUntil, deniedCost int64
	refill                  chan struct{} // closed when the take in flight returns
	lastUse                 int64
	alg                     ratelimit.Algorithm
	limit                   ratelimit.Limit
}

func newLeaseState() *leaseState { return &leaseState{remaining: -1} }

// reset starts the state again for c's algorithm and limit. l.mu must be
// held; a take in flight (refill) stays.
func (l *leaseState) reset(c ratelimit.Check) {
	l.tokens, l.leased, l.takenAt, l.expires = 0, 0, 0, 0
	l.remaining, l.resetAt, l.deniedUntil, l.deniedCost = -1, 0, 0, 0
	l.alg, l.limit = c.Algorithm, c.Limit
}

// refund is a lease's unused units to give back.
type refund struct {
	namespace, key string
	alg            ratelimit.Algorithm
	limit          ratelimit.Limit
	units          int64
}

// applyLease decides c (an OpTake with 1 <= Cost <= Burst) in Lease mode.
func (s *Store) applyLease(ctx context.Context, r *Rule, c ratelimit.Check, shard int) (ratelimit.Outcome, error) {
	k := stateKey{c.Namespace, c.Key}
	exact := false // after a lease was refused, this call asks for its own cost only
	for {
		l := s.leases.get(k, newLeaseState)
		now := s.now()
		l.mu.Lock()
		if l.dead {
			l.mu.Unlock()
			continue
		}
		l.lastUse = now
		if l.alg == nil || l.alg.Name() != c.Algorithm.Name() || l.limit != c.Limit {
			// A new key, or the rule changed: units leased under the old
			// rule go back, and sizing starts again.
			if rf, ok := l.takeRefund(k); ok {
				s.queueRefund(rf)
			}
			l.reset(c)
		}
		degraded := s.health.degraded()
		if l.tokens >= c.Cost && (now < l.expires || degraded) {
			l.tokens -= c.Cost
			o := l.localOutcome(now)
			l.mu.Unlock()
			s.local(c, degraded, true)
			return o, nil
		}
		if now < l.deniedUntil && c.Cost >= l.deniedCost {
			o := l.deniedOutcome(now)
			l.mu.Unlock()
			s.local(c, degraded, false)
			return o, nil
		}
		if ch := l.refill; ch != nil {
			// One caller per key takes the next lease; the others wait
			// for it within their own deadline.
			l.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return ratelimit.Outcome{}, fmt.Errorf("%w: tier: waiting for a lease: %w", ratelimit.ErrUnavailable, ctx.Err())
			}
		}
		if !s.health.usable(now) {
			l.mu.Unlock()
			s.stats.degraded.Add(1)
			err := s.degradedErr()
			s.emit(Event{Kind: DegradedDecision, Namespace: c.Namespace, Key: c.Key, Units: c.Cost, Err: err})
			return ratelimit.Outcome{}, err
		}
		size := c.Cost
		if !exact {
			size = l.nextSize(r, c, now)
		}
		if l.tokens > 0 {
			// Expired, or too few for c: what is left goes back.
			if rf, ok := l.takeRefund(k); ok {
				s.queueRefund(rf)
			}
		}
		ch := make(chan struct{})
		l.refill = ch
		l.mu.Unlock()

		take := c
		take.Cost = size
		o, err := s.call(ctx, take, shard)
		now = s.now()
		l.mu.Lock()
		l.refill = nil
		close(ch)
		if err != nil {
			l.mu.Unlock()
			return o, err
		}
		l.remaining = o.Remaining
		l.resetAt = now + int64(o.ResetAfter)
		switch {
		case o.Allowed:
			l.tokens, l.leased, l.takenAt = size-c.Cost, size, now
			l.expires = now + int64(r.LeaseTTL)
			o.Remaining += l.tokens
			l.mu.Unlock()
			if size > c.Cost {
				s.stats.leaseRefreshes.Add(1)
				s.stats.leasedUnits.Add(size)
				s.emit(Event{Kind: LeaseRefresh, Namespace: c.Namespace, Key: c.Key, Units: size})
			}
			s.stats.storeDecisions.Add(1)
			s.emit(Event{Kind: StoreDecision, Namespace: c.Namespace, Key: c.Key, Units: c.Cost, Allowed: true})
			return o, nil
		case size > c.Cost:
			// The level is below the lease: ask again for c alone.
			l.leased = 0
			l.mu.Unlock()
			exact = true
			continue
		default:
			wait := min(o.RetryAfter, r.LeaseTTL) // Never and long waits are asked again after a TTL
			l.deniedUntil, l.deniedCost = now+int64(wait), c.Cost
			l.mu.Unlock()
			s.stats.storeDecisions.Add(1)
			s.emit(Event{Kind: StoreDecision, Namespace: c.Namespace, Key: c.Key, Units: c.Cost})
			return o, nil
		}
	}
}

// local counts a decision made in process.
func (s *Store) local(c ratelimit.Check, degraded, allowed bool) {
	kind := LocalDecision
	if degraded {
		kind = DegradedDecision
		s.stats.degraded.Add(1)
	} else {
		s.stats.local.Add(1)
	}
	s.emit(Event{Kind: kind, Namespace: c.Namespace, Key: c.Key, Units: c.Cost, Allowed: allowed})
}

// nextSize returns the size of the lease to take for c at now: it doubles
// while leases run out before half their TTL and shrinks to what the last
// one sold when it expired, starting at the cost itself (an exact take);
// it is at most 1/Nodes of the level the backing store last reported and
// of what the bucket gives over a TTL (B + r·TTL), MaxLease and the burst; never
// below c.Cost. Near exhaustion it is therefore c.Cost: exact.
func (l *leaseState) nextSize(r *Rule, c ratelimit.Check, now int64) int64 {
	size := c.Cost
	switch {
	case l.leased == 0:
	case now < l.expires: // spent before expiry
		size = l.leased
		if now-l.takenAt < int64(r.LeaseTTL)/2 {
			size = 2 * l.leased
		}
	default: // expired: what it sold
		size = l.leased - l.tokens
	}
	nodes := int64(r.Nodes)
	if l.remaining >= 0 {
		size = min(size, l.remaining/nodes)
	}
	// What the bucket can give over one TTL, split over the nodes.
	share := (float64(c.Limit.Burst) + float64(c.Limit.Count)*r.LeaseTTL.Seconds()/c.Limit.Period.Seconds()) / float64(nodes)
	if share < float64(size) {
		size = int64(share)
	}
	if r.MaxLease > 0 {
		size = min(size, r.MaxLease)
	}
	return max(min(size, c.Limit.Burst), c.Cost)
}

// localOutcome is the outcome of a take spent from the lease.
func (l *leaseState) localOutcome(now int64) ratelimit.Outcome {
	return ratelimit.Outcome{
		Allowed:    true,
		Changed:    true,
		Remaining:  l.tokens + max(l.remaining, 0),
		ResetAfter: time.Duration(max(l.resetAt-now, 0)),
	}
}

// deniedOutcome is the outcome of a take refused by a cached denial.
func (l *leaseState) deniedOutcome(now int64) ratelimit.Outcome {
	return ratelimit.Outcome{
		Remaining:  l.tokens,
		RetryAfter: time.Duration(l.deniedUntil - now),
		ResetAfter: time.Duration(max(l.resetAt-now, 0)),
	}
}

// takeRefund empties the lease into a refund of its unspent units, if it
// has any. l.mu must be held.
func (l *leaseState) takeRefund(k stateKey) (refund, bool) {
	if l.tokens <= 0 || l.alg == nil {
		return refund{}, false
	}
	rf := refund{namespace: k.namespace, key: k.key, alg: l.alg, limit: l.limit, units: l.tokens}
	l.tokens = 0
	return rf, true
}

// queueRefund hands rf to the background goroutine, which gives the units
// back; when its queue is full the units are dropped (under-admission of
// at most one lease, counted in Stats.DroppedUnits).
func (s *Store) queueRefund(rf refund) {
	select {
	case s.refunds <- rf:
	default:
		s.stats.droppedUnits.Add(rf.units)
		s.emit(Event{Kind: Refund, Namespace: rf.namespace, Key: rf.key, Units: rf.units, Err: errRefundQueueFull})
	}
}

var errRefundQueueFull = fmt.Errorf("%w: tier: refund queue full", ratelimit.ErrUnavailable)

// refund gives rf's units back to the backing store.
func (s *Store) refund(ctx context.Context, rf refund) {
	c := ratelimit.Check{Namespace: rf.namespace, Key: rf.key, Algorithm: rf.alg, Limit: rf.limit, Cost: rf.units, Op: ratelimit.OpRefund}
	_, err := s.call(ctx, c, 0)
	if err != nil {
		s.stats.droppedUnits.Add(rf.units)
	} else {
		s.stats.refundedUnits.Add(rf.units)
	}
	s.emit(Event{Kind: Refund, Namespace: rf.namespace, Key: rf.key, Units: rf.units, Err: err})
}

// drainRefunds gives back every queued refund.
func (s *Store) drainRefunds(ctx context.Context) {
	for {
		select {
		case rf := <-s.refunds:
			s.refund(ctx, rf)
		default:
			return
		}
	}
}

// sweepLeases refunds the unspent units of expired leases (not while the
// backing store is failing: degraded decisions still spend them) and drops
// the states of keys idle for two TTLs.
func (s *Store) sweepLeases() {
	now := s.now()
	degraded := s.health.degraded()
	var due []refund
	s.leases.each(func(k stateKey, l *leaseState) bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.refill != nil {
			return true
		}
		if !degraded && l.tokens > 0 && now >= l.expires {
			if rf, ok := l.takeRefund(k); ok {
				due = append(due, rf)
			}
		}
		ttl := int64(s.rule(k.namespace).LeaseTTL)
		if l.tokens == 0 && now-l.lastUse > 2*ttl && now >= l.deniedUntil {
			l.dead = true
			return false
		}
		return true
	})
	for _, rf := range due {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s.refund(ctx, rf)
		cancel()
	}
}
