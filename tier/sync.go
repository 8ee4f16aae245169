package tier

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/muldiv"
)

// syncable reports whether alg and limit can be decided in Sync mode: the
// backing store must record consumption into debt (ratelimit.Charger),
// and the algorithm must be a rate (a token bucket, GCRA, a leaky bucket
// as a meter), whose ResetAfter tells the units missing from a full
// bucket, so that a view can be rebuilt from the backing store's reply.
// A window algorithm's ResetAfter is the end of its window instead; such
// rules are passed through exactly.
func syncable(alg ratelimit.Algorithm, limit ratelimit.Limit) bool {
	ch, ok := alg.(ratelimit.Charger)
	if !ok {
		return false
	}
	o, _, err := ch.Charge(nil, 0, limit, 1, make([]byte, 0, 32))
	return err == nil && o.ResetAfter == time.Duration(muldiv.Ceil(1, int64(limit.Period), limit.Count))
}

// syncView is one key's local copy of the global bucket.
type syncView struct {
	mu    sync.Mutex
	dead  bool
	state []byte // the algorithm's state at the local clock; nil before the first pull
	// pending are units admitted here and not yet charged to the backing
	// store; inflight those of the push in flight.
	pending, inflight int64
	// spent are units admitted since the last pull, at most slice.
	spent, slice int64
	pulledAt     int64
	lastUse      int64
	pushing      bool
	init         chan struct{} // closed when the first take returns
	alg          ratelimit.Algorithm
	limit        ratelimit.Limit
	rateBased    bool
	scratch      []byte
	// weight is this node's share of the key's recent consumption;
	// prevLevel and prevReply the level and time of the previous pull.
	weight               float64
	prevLevel, prevReply int64
}

func newSyncView() *syncView { return &syncView{} }

// applySync decides c (an OpTake with 1 <= Cost <= Burst) in Sync mode.
func (s *Store) applySync(ctx context.Context, r *Rule, c ratelimit.Check) (ratelimit.Outcome, error) {
	k := stateKey{c.Namespace, c.Key}
	for {
		v := s.views.get(k, newSyncView)
		now := s.now()
		v.mu.Lock()
		if v.dead {
			v.mu.Unlock()
			continue
		}
		v.lastUse = now
		if v.alg == nil || v.alg.Name() != c.Algorithm.Name() || v.limit != c.Limit {
			// A new key or a changed rule: pull again. Units admitted
			// under the old rule are still charged.
			v.alg, v.limit, v.state = c.Algorithm, c.Limit, nil
			v.rateBased = syncable(c.Algorithm, c.Limit)
		}
		if !v.rateBased {
			v.mu.Unlock()
			return s.applyBacking(ctx, c, 0)
		}
		if v.state == nil {
			// The first take of a key is the backing store's decision,
			// and its reply is the view's first pull.
			if ch := v.init; ch != nil {
				v.mu.Unlock()
				select {
				case <-ch:
					continue
				case <-ctx.Done():
					return ratelimit.Outcome{}, fmt.Errorf("%w: tier: waiting for a view: %w", ratelimit.ErrUnavailable, ctx.Err())
				}
			}
			if !s.health.usable(now) {
				v.mu.Unlock()
				s.stats.degraded.Add(1)
				err := s.degradedErr()
				s.emit(Event{Kind: DegradedDecision, Namespace: c.Namespace, Key: c.Key, Units: c.Cost, Err: err})
				return ratelimit.Outcome{}, err
			}
			ch := make(chan struct{})
			v.init = ch
			v.mu.Unlock()
			o, err := s.call(ctx, c, 0)
			now = s.now()
			v.mu.Lock()
			v.init = nil
			close(ch)
			if err == nil && v.alg == c.Algorithm && v.limit == c.Limit {
				v.pull(o, now, now, c.Cost, r)
			}
			v.mu.Unlock()
			if err == nil {
				s.stats.storeDecisions.Add(1)
				s.emit(Event{Kind: StoreDecision, Namespace: c.Namespace, Key: c.Key, Units: c.Cost, Allowed: o.Allowed})
			}
			return o, err
		}
		degraded := s.health.degraded()
		if v.spent+c.Cost > v.slice && !degraded && !v.pushing && now-v.pulledAt >= int64(r.SyncInterval) {
			// The slice is spent and the view is older than an interval,
			// as after idleness: pull now rather than at the next tick.
			check := v.startPush(k)
			v.mu.Unlock()
			s.push(ctx, k, v, check)
			continue
		}
		if v.spent+c.Cost > v.slice {
			untilPull := max(time.Duration(v.pulledAt+int64(r.SyncInterval)-now), 1)
			v.mu.Unlock()
			if degraded {
				s.stats.degraded.Add(1)
				err := s.degradedErr()
				s.emit(Event{Kind: DegradedDecision, Namespace: c.Namespace, Key: c.Key, Units: c.Cost, Err: err})
				return ratelimit.Outcome{}, err
			}
			// This node's slice is spent: wait for the next pull.
			s.local(c, false, false)
			return ratelimit.Outcome{RetryAfter: untilPull}, nil
		}
		o, next, err := c.Algorithm.Decide(v.state, now, c.Limit, c.Cost, v.scratch[:0])
		if err != nil {
			v.state = nil // pull again
			v.mu.Unlock()
			return ratelimit.Outcome{}, err
		}
		if o.Allowed {
			v.scratch, v.state = v.state[:0], next
			v.pending += c.Cost
			v.spent += c.Cost
		}
		v.mu.Unlock()
		s.local(c, degraded, o.Allowed)
		return o, nil
	}
}

// pull rebuilds the view from the backing store's outcome o, received
// at now for a request sent at sent that charged charged units, for a
// bucket that does not yet include v.pending: the units missing from a
// full bucket are o.ResetAfter·Count/Period (more than Burst when it is
// in debt). Until the next pull the view may spend its slice, a share w
// of the level plus one interval's refill, where w is this node's part of
// the consumption the backing store saw since the previous pull (never
// below 1/Nodes). v.mu must be held.
func (v *syncView) pull(o ratelimit.Outcome, sent, now, charged int64, r *Rule) {
	l := v.limit
	missing := muldiv.Floor(int64(o.ResetAfter), l.Count, int64(l.Period))
	_, state, err := v.alg.(ratelimit.Charger).Charge(nil, now, l, min(missing+v.pending, ratelimit.MaxCost), nil)
	if err != nil {
		v.state = nil
		return
	}
	v.state = state
	level := l.Burst - missing // at the backing store, without v.pending
	nodes := int64(r.Nodes)
	floor := 1 / float64(nodes)
	if v.pulledAt == 0 {
		v.weight = floor
	} else {
		// Units consumed everywhere since the previous pull: the level
		// then, plus the refill since (a full bucket refills no further),
		// less the level now.
		refill := muldiv.Floor(now-v.prevReply, l.Count, int64(l.Period))
		total := min(v.prevLevel+refill, l.Burst) - level
		if total > 0 {
			share := min(float64(charged)/float64(total), 1)
			v.weight = (v.weight + max(share, floor)) / 2
		}
	}
	v.prevLevel, v.prevReply = level, now
	refill := muldiv.Floor(int64(r.SyncInterval), l.Count, int64(l.Period))
	v.slice = int64(math.Ceil(v.weight * float64(max(0, level-v.pending+refill))))
	v.spent = 0
	v.pulledAt = sent
}

// pushAll charges every view's pending units to the backing store and
// pulls the views of keys in use back; with all set (Close), only the
// charges. Views idle for 20 intervals are dropped.
func (s *Store) pushAll(ctx context.Context, closing bool) {
	now := s.now()
	type job struct {
		k     stateKey
		v     *syncView
		check ratelimit.Check
	}
	var jobs []job
	s.views.each(func(k stateKey, v *syncView) bool {
		v.mu.Lock()
		defer v.mu.Unlock()
		if v.pushing {
			return true
		}
		r := s.rule(k.namespace)
		due := now-v.pulledAt >= int64(r.SyncInterval)*3/4 // a tick a little early is still due
		switch {
		case v.pending > 0 && (closing || due):
		case v.pending == 0 && !closing && due && v.state != nil && v.lastUse > v.pulledAt:
			// A key in use: pull its level back.
		default:
			if v.pending == 0 && v.init == nil && now-v.lastUse > 20*int64(r.SyncInterval) {
				v.dead = true
				return false
			}
			return true
		}
		jobs = append(jobs, job{k, v, v.startPush(k)})
		return true
	})
	if len(jobs) == 0 {
		return
	}
	if !closing && !s.health.usable(now) {
		for _, j := range jobs {
			j.v.mu.Lock()
			j.v.pending += j.v.inflight
			j.v.inflight, j.v.pushing = 0, false
			j.v.mu.Unlock()
		}
		return
	}
	const workers = 8
	var wg sync.WaitGroup
	next := make(chan job)
	for range min(workers, len(jobs)) {
		wg.Go(func() {
			for j := range next {
				s.push(ctx, j.k, j.v, j.check)
			}
		})
	}
	for _, j := range jobs {
		next <- j
	}
	close(next)
	wg.Wait()
}

// startPush marks v as pushing and returns the check that charges its
// pending units, or peeks when there are none. v.mu must be held.
func (v *syncView) startPush(k stateKey) ratelimit.Check {
	c := ratelimit.Check{Namespace: k.namespace, Key: k.key, Algorithm: v.alg, Limit: v.limit, Cost: v.pending, Op: ratelimit.OpCharge}
	if v.pending == 0 {
		c.Op = ratelimit.OpTake // a peek: pull only
	}
	v.inflight, v.pending, v.pushing = v.pending, 0, true
	return c
}

// push applies check, from v.startPush, and pulls v back from the reply.
// v.mu must not be held.
func (s *Store) push(ctx context.Context, k stateKey, v *syncView, check ratelimit.Check) {
	sent := s.now()
	o, err := s.call(ctx, check, 0)
	now := s.now()
	v.mu.Lock()
	if err != nil {
		// Charged again at the next push. After an unknown outcome that
		// may count the units twice: the view then under-admits by them
		// rather than over-admit.
		v.pending += v.inflight
	} else if v.alg == check.Algorithm && v.limit == check.Limit {
		charged := check.Cost
		if check.Op != ratelimit.OpCharge {
			charged = 0
		}
		v.pull(o, sent, now, charged, s.rule(k.namespace))
	}
	v.inflight, v.pushing = 0, false
	v.mu.Unlock()
	if check.Op == ratelimit.OpCharge {
		if err == nil {
			s.stats.syncPushes.Add(1)
			s.stats.pushedUnits.Add(check.Cost)
		}
		s.emit(Event{Kind: SyncPush, Namespace: k.namespace, Key: k.key, Units: check.Cost, Err: err})
	}
}
