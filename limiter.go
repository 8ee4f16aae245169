package sluice

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/decision"
)

// Limiter enforces one Rule on keys, in one process or across a fleet
// depending on its store. It is shaped like golang.org/x/time/rate.Limiter
// with a key on every call: Allow is shorthand for AllowN(ctx, key, 1),
// ReserveN and Reservation.Cancel take units ahead, WaitN blocks.
//
// Most callers want Allow. A Limiter is safe for concurrent use and holds
// no resources of its own: there is nothing to close. Create one with New;
// the zero value is not usable.
type Limiter struct {
	caller
	rule atomic.Pointer[compiled]
	mu   sync.Mutex // serialises SetRule
}

// New returns a Limiter for rule. Without WithStore it keeps its buckets in
// the process-wide memory store, shared with every limiter of the same rule
// name. Errors wrap ErrInvalid.
func New(rule Rule, opts ...Option) (*Limiter, error) {
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	r, err := compile(rule, cfg.store, nil)
	if err != nil {
		return nil, err
	}
	l := &Limiter{caller: newCaller(cfg.store, cfg.observe)}
	if mem, ok := cfg.store.(*memstore.Store); ok {
		l.fast = mem.Namespace(rule.Name)
	}
	l.prepare(r)
	l.rule.Store(r)
	return l, nil
}

// prepare readies r, not yet published, for the memory store's hot path.
func (l *Limiter) prepare(r *compiled) {
	if l.fast != nil && r.budget <= 0 && !r.Limit.IsUnlimited() {
		r.prep = memstore.Prepare(r.alg, r.Limit)
	}
}

// Allow reports whether one unit for key may be taken now, and takes it if
// so. It is shorthand for AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (d Decision, err error) {
	err = l.takeRule(ctx, key, 1, &d)
	return d, err
}

// AllowN reports whether n units for key may be taken now, and takes them
// if so; n 0 only peeks. A denial is a Decision with Allowed false, not an
// error. When the store fails or exceeds the rule's budget, the rule's
// failure policy answers (Decision.ByPolicy): a fail-open rule allows with
// a nil error, a fail-closed rule denies with an error wrapping
// ErrUnavailable or ErrUnknownOutcome. Only the caller's own cancelled
// context returns its context error.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (d Decision, err error) {
	err = l.takeRule(ctx, key, n, &d)
	return d, err
}

// takeRule is take under the rule's own limit. AllowN stays small enough
// to inline, so its Decision is filled where the caller keeps it.
func (l *Limiter) takeRule(ctx context.Context, key string, n int64, d *Decision) error {
	r := l.rule.Load()
	if prep := r.prep; prep != nil {
		// The memory store's hot path: no Check to build, and the decision
		// filled once, in place, field by field (a composite literal is
		// built aside and copied in 16-byte moves, whose loads stall on
		// the smaller stores just made). The store writes the outcome's
		// fields before its unlock, which commits every store before it,
		// so the caller's copy of *d waits on none (docs/memory.md).
		d.Limit.Count, d.Limit.Period, d.Limit.Burst = r.Limit.Count, r.Limit.Period, r.Limit.Burst
		d.Rule, d.ByPolicy = r.Name, false
		if err := l.fast.Take(ctx, prep, key, n, (*decision.Fields)(d)); err != nil {
			return l.failed(ctx, r, r.Limit, key, err, d)
		}
		if l.observe != nil {
			l.observe(ctx, key, *d, nil)
		}
		return nil
	}
	return l.take(ctx, r, r.Limit, key, n, d)
}

// AllowWithLimit is AllowN under limit instead of the rule's: for limits
// that vary per caller, such as a plan's. The key's bucket is the rule's,
// so a caller whose limit changes carries on from its state; the rule's
// algorithm, budget, failure policy and observer apply.
func (l *Limiter) AllowWithLimit(ctx context.Context, key string, n int64, limit Limit) (Decision, error) {
	r := l.rule.Load()
	var d Decision
	if err := validateLimit(r.Name, r.Algorithm, limit); err != nil {
		d = Decision{Limit: limit, Rule: r.Name}
		l.observed(ctx, key, &d, err)
		return d, err
	}
	err := l.take(ctx, r, limit, key, n, &d)
	return d, err
}

// take decides n units for key under limit and writes the decision to *d,
// which the callers return by value: filling it in place saves copying it
// up the call chain.
func (l *Limiter) take(ctx context.Context, r *compiled, limit Limit, key string, n int64, d *Decision) error {
	c := ratelimit.Check{Namespace: r.Name, Key: key, Algorithm: r.alg, Limit: limit, Cost: n}
	if limit.IsUnlimited() {
		err := c.ValidateRequest()
		*d = unlimited(&r.Rule)
		d.Limit = limit
		if err != nil {
			d.Allowed = false
		}
		l.observed(ctx, key, d, err)
		return err
	}
	var o ratelimit.Outcome
	err := l.apply(ctx, r.budget, &c, &o)
	if err == nil {
		*d = decisionOf(&o, &r.Rule)
		d.Limit = limit
		l.observed(ctx, key, d, nil)
		return nil
	}
	return l.failed(ctx, r, limit, key, err, d)
}

// failed writes to *d the decision on a store call that failed with err
// and returns the error to return.
func (l *Limiter) failed(ctx context.Context, r *compiled, limit Limit, key string, err error, d *Decision) error {
	policy, err := classify(ctx, err)
	if !policy {
		*d = Decision{Limit: limit, Rule: r.Name}
		l.observed(ctx, key, d, err)
		return err
	}
	*d = byPolicy(&r.Rule)
	d.Limit = limit
	l.observed(ctx, key, d, err)
	if r.FailOpen {
		return nil
	}
	return err
}

// Reset makes key fully available again under the rule.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	r := l.rule.Load()
	if !ratelimit.ValidKey(key) {
		return fmt.Errorf("%w: key length %d outside 1..%d", ratelimit.ErrInvalidKey, len(key), ratelimit.MaxKeyLen)
	}
	return withBudget(ctx, r.budget, func(ctx context.Context) error {
		return l.store.Reset(ctx, r.Name, key)
	})
}

// SetRule replaces the limiter's rule, which must keep its Name, atomically
// for concurrent callers: each call sees the old rule or the new one. Buckets
// carry on from their state: a new limit applies to what each key has left
// (no reset, no free burst), as each algorithm's documentation states. A new
// algorithm is an explicit change too: each key's state written by the old
// algorithm is converted on first use to the new algorithm's state with as
// many units available. Errors wrap ErrInvalid, and then nothing changes.
func (l *Limiter) SetRule(rule Rule) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev := l.rule.Load()
	if rule.Name != prev.Name {
		return fmt.Errorf("%w: SetRule cannot rename rule %q to %q", ratelimit.ErrInvalidRule, prev.Name, rule.Name)
	}
	r, err := compile(rule, l.store, prev)
	if err != nil {
		return err
	}
	l.prepare(r)
	l.rule.Store(r)
	return nil
}

// Reservation is n units taken ahead by Limiter.ReserveN. If OK, the caller
// waits Delay before acting, or calls Cancel to give the units back. It is
// safe for concurrent use.
type Reservation struct {
	ok       bool
	delay    time.Duration
	l        *Limiter
	r        *compiled
	key      string
	n        int64
	canceled atomic.Bool
}

// OK reports whether the units were reserved.
func (r *Reservation) OK() bool { return r.ok }

// Delay is how long to wait, from the moment ReserveN returned, before
// acting. When the reservation is not OK it is the wait the reservation
// would have needed: longer than the maxWait given, or Never when n exceeds
// the burst.
func (r *Reservation) Delay() time.Duration { return r.delay }

// Cancel gives the reserved units back as far as the algorithm allows.
// Cancelling twice, or a reservation that is not OK or was granted by the
// failure policy, does nothing.
func (r *Reservation) Cancel(ctx context.Context) error {
	if r == nil || !r.ok || r.n == 0 || r.r == nil || r.canceled.Swap(true) {
		return nil
	}
	c := ratelimit.Check{Namespace: r.r.Name, Key: r.key, Algorithm: r.r.alg, Limit: r.r.Limit, Cost: r.n, Op: ratelimit.OpRefund}
	var o ratelimit.Outcome
	err := r.l.apply(ctx, r.r.budget, &c, &o)
	if err != nil {
		_, err = classify(ctx, err)
	}
	return err
}

// ReserveN takes n units for key now, possibly before they are available,
// when the caller would wait at most maxWait; see Reservation. The
// algorithm must be able to reserve (token bucket, GCRA and leaky bucket
// can); otherwise the error wraps ratelimit.ErrUnsupported. A store failure
// gives a fail-open rule an OK reservation with no delay, and a fail-closed
// rule the store's error.
func (l *Limiter) ReserveN(ctx context.Context, key string, n int64, maxWait time.Duration) (*Reservation, error) {
	r := l.rule.Load()
	res := &Reservation{l: l, key: key, n: n}
	c := ratelimit.Check{Namespace: r.Name, Key: key, Algorithm: r.alg, Limit: r.Limit, Cost: n, Op: ratelimit.OpReserve, MaxWait: maxWait}
	if r.Limit.IsUnlimited() {
		if err := c.ValidateRequest(); err != nil {
			return nil, err
		}
		res.ok = true
		return res, nil
	}
	var o ratelimit.Outcome
	err := l.apply(ctx, r.budget, &c, &o)
	if err != nil {
		policy, err := classify(ctx, err)
		d := byPolicy(&r.Rule)
		if !policy {
			d = Decision{Limit: r.Limit, Rule: r.Name}
		}
		l.observed(ctx, key, &d, err)
		if policy && r.FailOpen {
			res.ok = true
			return res, nil
		}
		return nil, err
	}
	d := decisionOf(&o, &r.Rule)
	l.observed(ctx, key, &d, nil)
	res.ok, res.r = o.Allowed, r
	res.delay = o.Delay
	if !o.Allowed {
		res.delay = o.RetryAfter
	}
	return res, nil
}

// WaitN blocks until n units for key are taken, then returns nil. It
// returns an error wrapping ErrWaitTooLong at once, taking nothing, when
// the wait would pass ctx's deadline or n exceeds the burst, and ctx's
// error if ctx ends while waiting (giving the units back when the algorithm
// can). Algorithms that can reserve wait in a queue, first come first
// served; others are polled at their RetryAfter. Store failures follow the
// rule's failure policy, as for AllowN.
func (l *Limiter) WaitN(ctx context.Context, key string, n int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	maxWait := Never
	if dl, ok := ctx.Deadline(); ok {
		maxWait = max(time.Until(dl), 0)
	}
	if _, ok := l.rule.Load().alg.(ratelimit.Reserver); ok {
		res, err := l.ReserveN(ctx, key, n, maxWait)
		if err != nil {
			return err
		}
		if !res.OK() {
			return waitTooLong(res.Delay(), maxWait)
		}
		if res.Delay() <= 0 {
			return nil
		}
		if err := sleep(ctx, res.Delay()); err != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			return errors.Join(err, res.Cancel(cctx))
		}
		return nil
	}
	for {
		d, err := l.AllowN(ctx, key, n)
		if err != nil {
			return err
		}
		if d.Allowed {
			return nil
		}
		if d.RetryAfter == Never {
			return waitTooLong(d.RetryAfter, maxWait)
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d.RetryAfter {
			return waitTooLong(d.RetryAfter, time.Until(dl))
		}
		if err := sleep(ctx, d.RetryAfter); err != nil {
			return err
		}
	}
}

func waitTooLong(need, have time.Duration) error {
	if need == Never {
		return fmt.Errorf("%w: the cost exceeds the burst and can never be admitted", ErrWaitTooLong)
	}
	return fmt.Errorf("%w: need %s, deadline allows %s", ErrWaitTooLong, need, have)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
