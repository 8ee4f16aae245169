package sluice

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// caller is what a Limiter and a Composite share: the store, its fast path
// and the observer.
type caller struct {
	store     ratelimit.Store
	deadlined ratelimit.DeadlineApplier // the store, when it takes a deadline as a value
	fast      *memstore.Namespace       // the memory store's hot path for a Limiter's rule, or nil
	observe   func(ctx context.Context, key string, d Decision, err error)
}

// newCaller returns the caller of store.
func newCaller(store ratelimit.Store, observe func(ctx context.Context, key string, d Decision, err error)) caller {
	d, _ := store.(ratelimit.DeadlineApplier)
	return caller{store: store, deadlined: d, observe: observe}
}

// apply applies *c with a deadline of budget (none when 0), writing the
// outcome to *o on success.
func (cl *caller) apply(ctx context.Context, budget time.Duration, c *ratelimit.Check, o *ratelimit.Outcome) error {
	if budget <= 0 {
		if cl.fast != nil {
			return cl.fast.Apply(ctx, c, o)
		}
		out, err := cl.store.Apply(ctx, *c)
		if err == nil {
			*o = out
		}
		return err
	}
	var (
		out ratelimit.Outcome
		err error
	)
	if cl.deadlined != nil {
		if err := ctx.Err(); err != nil {
			return notSent(err)
		}
		out, err = cl.deadlined.ApplyBefore(ctx, time.Now().Add(budget), *c)
	} else {
		err = withBudget(ctx, budget, func(sctx context.Context) error {
			var err error
			out, err = cl.store.Apply(sctx, *c)
			return err
		})
	}
	if err == nil {
		*o = out
	}
	return err
}

// applyAll is apply for a composite.
func (cl *caller) applyAll(ctx context.Context, budget time.Duration, checks []ratelimit.Check, out []ratelimit.Outcome) error {
	if budget <= 0 {
		_, err := cl.store.ApplyAll(ctx, checks, out)
		return err
	}
	if cl.deadlined != nil {
		if err := ctx.Err(); err != nil {
			return notSent(err)
		}
		_, err := cl.deadlined.ApplyAllBefore(ctx, time.Now().Add(budget), checks, out)
		return err
	}
	// out is written only by the call withBudget waits for: after a
	// budget runs out, Decide answers by policy and never reads it.
	return withBudget(ctx, budget, func(sctx context.Context) error {
		_, err := cl.store.ApplyAll(sctx, checks, out)
		return err
	})
}

// notSent types the error of a caller's context that ended before the
// call reached the store: nothing was applied, so ErrUnavailable, where
// classify would take a bare deadline for an unknown outcome.
func notSent(ctxErr error) error {
	return fmt.Errorf("%w: the context ended before the store was called: %w", ratelimit.ErrUnavailable, ctxErr)
}

// withBudget runs fn, a store call, under a context that ends after
// budget (none when 0), and returns its error. The bound relies on the
// store returning when its context ends, as the Store contract requires
// and every in-repo store does: handing the call to another goroutine to
// abandon it at the deadline would cost a single Redis caller 16-45% of
// its decision time (benchstat, n=6).
func withBudget(ctx context.Context, budget time.Duration, fn func(context.Context) error) error {
	if budget <= 0 {
		return fn(ctx)
	}
	if err := ctx.Err(); err != nil {
		return notSent(err)
	}
	sctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	return fn(sctx)
}

// classify sorts the error of a store call made on behalf of ctx. It
// returns policy true when the failure policy answers instead (the store
// failed, or the budget or the caller's deadline ran out), with err typed
// as ratelimit.ErrUnavailable or ratelimit.ErrUnknownOutcome; and policy
// false with the error to return otherwise: the caller's own cancellation
// (its context error) or input the store refused.
func classify(ctx context.Context, err error) (policy bool, _ error) {
	if cerr := ctx.Err(); errors.Is(cerr, context.Canceled) {
		if errors.Is(err, context.Canceled) {
			return false, err
		}
		return false, fmt.Errorf("%w: %w", cerr, err)
	}
	switch {
	case errors.Is(err, ratelimit.ErrUnavailable), errors.Is(err, ratelimit.ErrUnknownOutcome):
		return true, err
	case errors.Is(err, context.DeadlineExceeded):
		// The store did not say whether it applied the call.
		return true, fmt.Errorf("%w: no answer from the store before the deadline: %w", ratelimit.ErrUnknownOutcome, err)
	}
	return false, err
}

func (cl *caller) observed(ctx context.Context, key string, d *Decision, err error) {
	if cl.observe != nil {
		cl.observe(ctx, key, *d, err)
	}
}
