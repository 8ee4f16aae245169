package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Limiter enforces one Rule on keys, in one process or across a fleet
// depending on its Store. It is shaped like golang.org/x/time/rate.Limiter
// with a key on every call: Allow is shorthand for AllowN(ctx, key, 1);
// Reserve and Cancel; Wait refuses up front when it would have to wait past
// the context deadline.
//
// Most callers want Allow. A Limiter is safe for concurrent use. Create one
// with New; the zero value is not usable. With no WithStore option it uses a
// new embedded MemoryStore, which Close releases.
type Limiter struct {
	rule     Rule
	store    Store
	owned    bool
	observer Observer
	closed   atomic.Bool
	// mem is store when it is a *MemoryStore, which the limiter calls
	// without Apply's copy of the check and re-validation of the rule,
	// and space is mem's namespace for the rule once looked up.
	mem   *MemoryStore
	space atomic.Pointer[memSpace]
}

// New returns a Limiter for rule. It validates the rule and the options and
// returns an error wrapping ErrInvalidRule, ErrInvalidLimit or
// ErrInvalidOption instead of panicking.
func New(rule Rule, opts ...Option) (*Limiter, error) {
	if err := rule.Validate(); err != nil {
		return nil, err
	}
	c, owned, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	l := &Limiter{rule: rule, store: c.store, owned: owned, observer: c.observer}
	l.mem, _ = c.store.(*MemoryStore)
	return l, nil
}

// Rule returns the limiter's rule.
func (l *Limiter) Rule() Rule { return l.rule }

// Store returns the store the limiter uses.
func (l *Limiter) Store() Store { return l.store }

// Allow reports whether one event for key may happen now. It is shorthand
// for AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (Decision, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN reports whether n events for key may happen now, and takes them if
// so. A denial is a Decision with Allowed false, not an error; n 0 peeks.
// Errors wrap the package sentinels; with FailOpen, store failures are
// answered by the policy instead.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (Decision, error) {
	var d Decision
	err := l.do(ctx, key, n, OpTake, 0, &d)
	return d, err
}

// Peek reports the state of key without taking anything: Allowed tells
// whether one event would pass.
func (l *Limiter) Peek(ctx context.Context, key string) (Decision, error) {
	var d Decision
	err := l.do(ctx, key, 0, OpTake, 0, &d)
	return d, err
}

// Reset makes key fully available again.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if l.closed.Load() {
		return ErrClosed
	}
	if !ValidKey(key) {
		return fmt.Errorf("%w: key length %d outside 1..%d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	return l.store.Reset(ctx, l.rule.Name, key)
}

// Close releases the embedded store if the limiter created it. Closing
// twice is not an error; calls after Close return ErrClosed.
func (l *Limiter) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	if l.owned {
		return l.store.Close()
	}
	return nil
}

// do applies op to key and writes the decision to *d, which the callers
// return by value: filling it in place saves copying it up the call chain.
func (l *Limiter) do(ctx context.Context, key string, n int64, op Op, maxWait time.Duration, d *Decision) error {
	if l.closed.Load() {
		*d = Decision{Rule: l.rule.Name, Limit: l.rule.Limit}
		return ErrClosed
	}
	c := Check{
		Namespace: l.rule.Name,
		Key:       key,
		Algorithm: l.rule.Algorithm,
		Limit:     l.rule.Limit,
		Cost:      n,
		Op:        op,
		MaxWait:   maxWait,
	}
	var (
		o   Outcome
		err error
	)
	if l.mem != nil {
		err = l.applyMemory(ctx, &c, &o)
	} else {
		o, err = l.store.Apply(ctx, c)
	}
	*d = decisionFrom(o, l.rule.Name, l.rule.Limit)
	if err != nil {
		*d = Decision{Rule: l.rule.Name, Limit: l.rule.Limit}
		if op == OpTake && storeFailure(err) && ctx.Err() == nil {
			d.ByPolicy = true
			if l.rule.OnFailure == FailOpen {
				d.Allowed = true
				d.Remaining = 0
				l.observe(ctx, key, *d, err)
				return nil
			}
		}
	}
	if l.observer != nil {
		l.observer.Observe(ctx, key, *d, err)
	}
	return err
}

// applyMemory is l.mem.Apply(ctx, *c) for a check built from l's rule,
// which New validated: only the per-call fields are checked, in the order
// and with the errors of Check.Validate. The outcome goes to *o, left
// unchanged on error.
func (l *Limiter) applyMemory(ctx context.Context, c *Check, o *Outcome) error {
	if err := l.mem.begin(ctx); err != nil {
		return err
	}
	if err := checkRequest(c); err != nil {
		return err
	}
	sp := l.space.Load()
	if sp == nil {
		sp = l.mem.space(c.Namespace, true)
		l.space.Store(sp)
	}
	return l.mem.apply(sp, c, o)
}

// checkRequest checks the per-call fields of c, the last checks of
// Check.Validate: a key of 1..MaxKeyLen bytes, a cost in 0..MaxCost, a
// known op and a non-negative MaxWait.
func checkRequest(c *Check) error {
	switch {
	case !ValidKey(c.Key):
		return fmt.Errorf("%w: key length %d outside 1..%d", ErrInvalidKey, len(c.Key), MaxKeyLen)
	case c.Cost < 0 || c.Cost > MaxCost:
		return fmt.Errorf("%w: cost %d outside 0..%d", ErrInvalidCost, c.Cost, int64(MaxCost))
	case c.Op > OpCharge:
		return fmt.Errorf("%w: unknown op %d", ErrInvalidRule, c.Op)
	case c.MaxWait < 0:
		return fmt.Errorf("%w: negative max wait %s", ErrInvalidCost, c.MaxWait)
	}
	return nil
}

func (l *Limiter) observe(ctx context.Context, key string, d Decision, err error) {
	if l.observer != nil {
		l.observer.Observe(ctx, key, d, err)
	}
}

// Reservation is n events taken in advance by Limiter.ReserveN. If OK, the
// caller must wait Delay before acting, or Cancel to give the events back.
type Reservation struct {
	// OK reports whether the events were reserved. When false nothing was
	// taken and Decision.RetryAfter tells how long the wait would be.
	OK bool
	// Delay is how long to wait, from the moment ReserveN returned, before
	// acting.
	Delay time.Duration
	// Decision is the store's decision for the reservation.
	Decision Decision

	l        *Limiter
	key      string
	n        int64
	canceled atomic.Bool
}

// Reserve is shorthand for ReserveN(ctx, key, 1, maxWait).
func (l *Limiter) Reserve(ctx context.Context, key string, maxWait time.Duration) (*Reservation, error) {
	return l.ReserveN(ctx, key, 1, maxWait)
}

// ReserveN takes n events for key now, possibly before they are available,
// as long as the caller would wait at most maxWait. The algorithm must
// implement Reserver (token bucket, GCRA and leaky bucket do); otherwise
// the error wraps ErrUnsupported.
func (l *Limiter) ReserveN(ctx context.Context, key string, n int64, maxWait time.Duration) (*Reservation, error) {
	var d Decision
	if err := l.do(ctx, key, n, OpReserve, maxWait, &d); err != nil {
		return nil, err
	}
	return &Reservation{OK: d.Allowed, Delay: d.Delay, Decision: d, l: l, key: key, n: n}, nil
}

// Cancel gives the reserved events back as far as the algorithm allows (it
// must implement Refunder). Cancelling twice, or a reservation that is not
// OK, does nothing.
func (r *Reservation) Cancel(ctx context.Context) error {
	if r == nil || !r.OK || r.n == 0 || r.canceled.Swap(true) {
		return nil
	}
	var d Decision
	return r.l.do(ctx, r.key, r.n, OpRefund, 0, &d)
}

// Wait is shorthand for WaitN(ctx, key, 1).
func (l *Limiter) Wait(ctx context.Context, key string) error {
	return l.WaitN(ctx, key, 1)
}

// WaitN blocks until n events for key are admitted, then returns nil. It
// returns an error wrapping ErrWaitTooLong at once, without taking anything,
// when the wait would pass ctx's deadline or n exceeds the burst, and
// ctx.Err() if ctx ends while waiting (giving the events back when the
// algorithm can). Algorithms with Reserver wait in a queue (first come,
// first served); others are polled at their RetryAfter.
func (l *Limiter) WaitN(ctx context.Context, key string, n int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	maxWait := Never
	if dl, ok := ctx.Deadline(); ok {
		maxWait = max(time.Until(dl), 0)
	}
	if _, ok := l.rule.Algorithm.(Reserver); ok {
		r, err := l.ReserveN(ctx, key, n, maxWait)
		if err != nil {
			return err
		}
		if !r.OK {
			return waitTooLong(r.Decision.RetryAfter, maxWait)
		}
		if r.Delay <= 0 {
			return nil
		}
		if err := sleep(ctx, r.Delay); err != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			return errors.Join(err, r.Cancel(cctx))
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
