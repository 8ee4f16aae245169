package tier

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// Store is a ratelimit.Store that decides in process what it can and
// asks the backing store for the rest, by the Rule of each namespace. It
// is safe for concurrent use. Create it with New; Close refunds what its
// leases hold and closes the backing store.
type Store struct {
	backing ratelimit.Store
	cfg     config

	leases  *table[leaseState]
	views   *table[syncView]
	subkeys *table[subKeys]
	health  health

	refunds chan refund
	stop    chan struct{}
	done    sync.WaitGroup
	closed  atomic.Bool
	closeMu sync.Mutex
	stats   counters
	// tickEach is the period of the background loop, sweepEach that of
	// the lease sweep within it.
	tickEach, sweepEach time.Duration
}

// New returns a Store over backing, an exact store shared by every
// process of the deployment. The Store owns backing: Close closes it.
// Errors wrap ratelimit.ErrInvalidOption.
func New(backing ratelimit.Store, opts ...Option) (*Store, error) {
	if backing == nil {
		return nil, fmt.Errorf("%w: nil backing store", ratelimit.ErrInvalidOption)
	}
	cfg := config{
		rules:         make(map[string]*Rule),
		clock:         ratelimit.SystemClock{},
		probeInterval: 100 * time.Millisecond,
	}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ratelimit.ErrInvalidOption)
		}
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.defaultRule == nil {
		r := Rule{}.withDefaults()
		cfg.defaultRule = &r
	}
	s := &Store{
		backing: backing,
		cfg:     cfg,
		leases:  newTable[leaseState](),
		views:   newTable[syncView](),
		subkeys: newTable[subKeys](),
		refunds: make(chan refund, 1024),
		stop:    make(chan struct{}),
	}
	s.health.probeInterval = int64(cfg.probeInterval)
	// The background loop sweeps expired leases and pushes sync views; it
	// ticks at the shortest interval any rule needs.
	// Sync views are pushed every tick, so it is the shortest
	// SyncInterval of a Sync rule; leases are swept every sweepEach, a
	// quarter of the shortest TTL. Exact rules need neither.
	s.tickEach, s.sweepEach = time.Second, time.Second
	for _, r := range append(slices.Collect(maps.Values(cfg.rules)), cfg.defaultRule) {
		switch r.Mode {
		case Sync:
			s.tickEach = min(s.tickEach, r.SyncInterval)
		case Lease:
			s.sweepEach = min(s.sweepEach, r.LeaseTTL/4)
		}
	}
	s.sweepEach = max(s.sweepEach, time.Millisecond)
	s.tickEach = max(min(s.tickEach, s.sweepEach), time.Millisecond)
	s.done.Add(1)
	go s.background()
	return s, nil
}

// rule returns the rule of namespace; callers must not modify it.
func (s *Store) rule(namespace string) *Rule {
	if r, ok := s.cfg.rules[namespace]; ok {
		return r
	}
	return s.cfg.defaultRule
}

// Apply decides c by its namespace's rule. OpTake checks with a positive
// cost are decided from leases (Lease) or views (Sync) when the rule says
// so; every other check (peeks, reservations, refunds, charges) goes to the
// backing store as it is.
func (s *Store) Apply(ctx context.Context, c ratelimit.Check) (ratelimit.Outcome, error) {
	if s.closed.Load() {
		return ratelimit.Outcome{}, ratelimit.ErrClosed
	}
	if err := c.Validate(); err != nil {
		return ratelimit.Outcome{}, err
	}
	if err := ctx.Err(); err != nil {
		// Even a decision made in process is not made for a caller that
		// has gone: nothing is taken.
		return ratelimit.Outcome{}, fmt.Errorf("%w: tier: %w", ratelimit.ErrUnavailable, err)
	}
	r := s.rule(c.Namespace)
	if sharded(r, c.Limit) {
		return s.applySharded(ctx, r, c)
	}
	if c.Op == ratelimit.OpTake && c.Cost > 0 && c.Cost <= c.Limit.Burst {
		switch {
		case r.Mode == Lease && leaseable(c.Algorithm):
			return s.applyLease(ctx, r, c, 0)
		case r.Mode == Sync: // applySync passes non-rate algorithms through
			return s.applySync(ctx, r, c)
		}
	}
	return s.applyBacking(ctx, c, 0)
}

// applyBacking passes c to the backing store, unless the store is
// degraded and it is not this caller's turn to probe it.
func (s *Store) applyBacking(ctx context.Context, c ratelimit.Check, shard int) (ratelimit.Outcome, error) {
	if !s.health.usable(s.now()) {
		s.stats.degraded.Add(1)
		err := s.degradedErr()
		s.emit(Event{Kind: DegradedDecision, Namespace: c.Namespace, Key: c.Key, Units: c.Cost, Shard: shard, Err: err})
		return ratelimit.Outcome{}, err
	}
	o, err := s.call(ctx, c, shard)
	if err == nil && c.Op == ratelimit.OpTake && c.Cost > 0 {
		s.stats.storeDecisions.Add(1)
		s.emit(Event{Kind: StoreDecision, Namespace: c.Namespace, Key: c.Key, Units: c.Cost, Allowed: o.Allowed, Shard: shard})
	}
	return o, err
}

// call applies c on the backing store and records its health.
func (s *Store) call(ctx context.Context, c ratelimit.Check, shard int) (ratelimit.Outcome, error) {
	if err := ctx.Err(); err != nil {
		// Over before it began: nothing sent, and nothing said about the
		// store's health.
		return ratelimit.Outcome{}, fmt.Errorf("%w: tier: %w", ratelimit.ErrUnavailable, err)
	}
	s.stats.storeCalls.Add(1)
	o, err := s.backing.Apply(ctx, c)
	s.observeCall(ctx, c.Namespace, c.Key, shard, err)
	return o, err
}

// observeCall records the result of a backing store call: a failure of
// the store (not of the input, not the caller's own cancellation) makes
// the Store degraded; a success after failures recovers it.
func (s *Store) observeCall(ctx context.Context, namespace, key string, shard int, err error) {
	if err == nil {
		if s.health.recovered() {
			s.emit(Event{Kind: StoreRecovered, Namespace: namespace, Key: key, Shard: shard})
		}
		return
	}
	if !storeFailure(ctx, err) {
		return
	}
	s.stats.storeErrors.Add(1)
	s.health.failed(s.now())
	s.emit(Event{Kind: StoreError, Namespace: namespace, Key: key, Shard: shard, Err: err})
}

// storeFailure reports whether err says the backing store failed or ran
// out of the call's budget, as opposed to refusing the input or the
// caller cancelling.
func storeFailure(ctx context.Context, err error) bool {
	if errors.Is(ctx.Err(), context.Canceled) {
		return false
	}
	return errors.Is(err, ratelimit.ErrUnavailable) || errors.Is(err, ratelimit.ErrUnknownOutcome) ||
		errors.Is(err, context.DeadlineExceeded)
}

// degradedErr is the error of a check the Store cannot decide while the
// backing store is failing: the rule's failure policy answers it.
func (s *Store) degradedErr() error {
	return fmt.Errorf("%w: tier: the backing store is failing and the local leases are spent", ratelimit.ErrUnavailable)
}

// ApplyAll passes the composite to the backing store unchanged: a
// composite stays atomic, all or nothing, exactly as the backing store
// makes it. Leases and views of the same keys are neither used nor
// changed by it. A composite naming a sharded rule is refused with
// ratelimit.ErrUnsupported: its sub-keys cannot be taken atomically.
func (s *Store) ApplyAll(ctx context.Context, checks []ratelimit.Check, out []ratelimit.Outcome) (bool, error) {
	if s.closed.Load() {
		return false, ratelimit.ErrClosed
	}
	for i := range checks {
		if sharded(s.rule(checks[i].Namespace), checks[i].Limit) {
			return false, fmt.Errorf("%w: tier: a composite cannot include rule %q: its keys are sharded", ratelimit.ErrUnsupported, checks[i].Namespace)
		}
	}
	if !s.health.usable(s.now()) {
		s.stats.degraded.Add(1)
		return false, s.degradedErr()
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("%w: tier: %w", ratelimit.ErrUnavailable, err)
	}
	s.stats.storeCalls.Add(1)
	ok, err := s.backing.ApplyAll(ctx, checks, out)
	ns, key := "", ""
	if len(checks) > 0 {
		ns, key = checks[0].Namespace, checks[0].Key
	}
	s.observeCall(ctx, ns, key, 0, err)
	return ok, err
}

// Reset resets key in the backing store (every sub-key of a sharded key)
// and drops the local lease or view without refunding it.
func (s *Store) Reset(ctx context.Context, namespace, key string) error {
	if s.closed.Load() {
		return ratelimit.ErrClosed
	}
	r := s.rule(namespace)
	k := stateKey{namespace, key}
	s.leases.remove(k)
	s.views.remove(k)
	for i := range r.Shards * b2iInt(r.Shards > 1) {
		sk := subKey(key, i, r.Shards)
		s.leases.remove(stateKey{namespace, sk})
		if err := s.backing.Reset(ctx, namespace, sk); err != nil {
			return err
		}
	}
	// A sharded key whose limit has fewer units than shards is kept
	// whole: reset that too.
	return s.backing.Reset(ctx, namespace, key)
}

// closeBudget bounds how long Close spends refunding leases and pushing
// views before it closes the backing store.
const closeBudget = 2 * time.Second

// Close stops the Store's goroutine, refunds the unused units of every
// lease, charges what sync views admitted since their last push, and
// closes the backing store. Closing twice is not an error.
func (s *Store) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed.Swap(true) {
		return nil
	}
	close(s.stop)
	s.done.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), closeBudget)
	defer cancel()
	s.drainRefunds(ctx)
	s.leases.each(func(k stateKey, l *leaseState) bool {
		l.mu.Lock()
		rf, ok := l.takeRefund(k)
		l.mu.Unlock()
		if ok {
			s.refund(ctx, rf)
		}
		return false
	})
	s.pushAll(ctx, true)
	return s.backing.Close()
}

// DefaultBudget reports the backing store's budget (ratelimit.Budgeter),
// or 5 ms, the Limiter's default for remote stores, when it states none.
func (s *Store) DefaultBudget() time.Duration {
	if b, ok := s.backing.(ratelimit.Budgeter); ok {
		return b.DefaultBudget()
	}
	return 5 * time.Millisecond
}

func (s *Store) now() int64 { return s.cfg.clock.Now() }

func (s *Store) emit(e Event) {
	if s.cfg.observe != nil {
		s.cfg.observe(e)
	}
}

// background sweeps expired leases into refunds and pushes sync views
// until Close.
func (s *Store) background() {
	defer s.done.Done()
	tick := time.NewTicker(s.tickEach)
	defer tick.Stop()
	var nextSweep int64
	for {
		select {
		case <-s.stop:
			return
		case rf := <-s.refunds:
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			s.refund(ctx, rf)
			cancel()
		case <-tick.C:
			if now := s.now(); now >= nextSweep {
				nextSweep = now + int64(s.sweepEach)
				s.sweepLeases()
				s.sweepSubKeys(now)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			s.pushAll(ctx, false)
			cancel()
		}
	}
}

// Stats are cumulative counts of what a Store did.
type Stats struct {
	// LocalDecisions were decided in process; StoreDecisions by the
	// backing store; DegradedDecisions while it was failing.
	LocalDecisions, StoreDecisions, DegradedDecisions int64
	// StoreCalls counts every call to the backing store, StoreErrors the
	// failed ones.
	StoreCalls, StoreErrors int64
	// LeaseRefreshes and LeasedUnits count leases taken; RefundedUnits
	// the units given back, DroppedUnits those whose refund failed.
	LeaseRefreshes, LeasedUnits, RefundedUnits, DroppedUnits int64
	// SyncPushes counts the charges of Sync views, PushedUnits their units.
	SyncPushes, PushedUnits int64
	// HeldUnits are units leased and neither spent nor refunded yet, and
	// UnpushedUnits units admitted by Sync views and not yet charged:
	// what a crash of this process would lose (docs/tier.md). SliceUnits
	// are units Sync views may still admit before their next pull. With
	// HeldUnits, what the Store can admit if the backing store fails now.
	// Stats scans every local state to count them.
	HeldUnits, UnpushedUnits, SliceUnits int64
}

type counters struct {
	local, storeDecisions, degraded                          atomic.Int64
	storeCalls, storeErrors                                  atomic.Int64
	leaseRefreshes, leasedUnits, refundedUnits, droppedUnits atomic.Int64
	syncPushes, pushedUnits                                  atomic.Int64
}

// Stats returns the Store's counts so far.
func (s *Store) Stats() Stats {
	var held, unpushed, slice int64
	s.leases.each(func(_ stateKey, l *leaseState) bool {
		l.mu.Lock()
		held += l.tokens
		l.mu.Unlock()
		return true
	})
	s.views.each(func(_ stateKey, v *syncView) bool {
		v.mu.Lock()
		unpushed += v.pending + v.inflight
		slice += max(v.slice-v.spent, 0)
		v.mu.Unlock()
		return true
	})
	c := &s.stats
	return Stats{
		HeldUnits: held, UnpushedUnits: unpushed, SliceUnits: slice,
		LocalDecisions: c.local.Load(), StoreDecisions: c.storeDecisions.Load(), DegradedDecisions: c.degraded.Load(),
		StoreCalls: c.storeCalls.Load(), StoreErrors: c.storeErrors.Load(),
		LeaseRefreshes: c.leaseRefreshes.Load(), LeasedUnits: c.leasedUnits.Load(),
		RefundedUnits: c.refundedUnits.Load(), DroppedUnits: c.droppedUnits.Load(),
		SyncPushes: c.syncPushes.Load(), PushedUnits: c.pushedUnits.Load(),
	}
}

var (
	_ ratelimit.Store    = (*Store)(nil)
	_ ratelimit.Budgeter = (*Store)(nil)
)
