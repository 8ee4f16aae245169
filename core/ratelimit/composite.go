package ratelimit

import (
	"context"
	"fmt"
	"sync/atomic"
)

// Composite enforces several rules together, for example per IP, per user,
// per user and endpoint, and global. One call checks every rule in one
// atomic store step: the strictest rule decides, and nothing is consumed
// unless every rule admits the request. All rules share one store.
//
// A Composite is safe for concurrent use. The zero value is not usable.
type Composite struct {
	rules    []Rule
	store    Store
	owned    bool
	observer Observer
	closed   atomic.Bool
}

// NewComposite returns a Composite of rules, which must have distinct
// names. It validates like New.
func NewComposite(rules []Rule, opts ...Option) (*Composite, error) {
	if len(rules) == 0 {
		return nil, fmt.Errorf("%w: a composite needs at least one rule", ErrInvalidRule)
	}
	seen := make(map[string]bool, len(rules))
	for _, r := range rules {
		if err := r.Validate(); err != nil {
			return nil, err
		}
		if seen[r.Name] {
			return nil, fmt.Errorf("%w: duplicate rule name %q", ErrInvalidRule, r.Name)
		}
		seen[r.Name] = true
	}
	c, owned, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	return &Composite{rules: append([]Rule(nil), rules...), store: c.store, owned: owned, observer: c.observer}, nil
}

// Rules returns a copy of the composite's rules.
func (c *Composite) Rules() []Rule { return append([]Rule(nil), c.rules...) }

// Allow is shorthand for AllowN(ctx, 1, keys...).
func (c *Composite) Allow(ctx context.Context, keys ...string) (Decision, error) {
	return c.AllowN(ctx, 1, keys...)
}

// AllowN checks n events against every rule: keys[i] is the key for the
// i-th rule. It returns the strictest rule's decision; when any rule
// denies, nothing is taken from any rule.
func (c *Composite) AllowN(ctx context.Context, n int64, keys ...string) (Decision, error) {
	ds, err := c.Decide(ctx, n, keys...)
	if err != nil && len(ds) == 0 {
		return Decision{}, err
	}
	best := ds[0]
	for _, d := range ds[1:] {
		if stricter(d, best) {
			best = d
		}
	}
	return best, err
}

// Decide is AllowN returning every rule's decision, in rule order. When the
// composite is denied, the allowed rules' decisions describe what they
// would have admitted; nothing was taken from them.
func (c *Composite) Decide(ctx context.Context, n int64, keys ...string) ([]Decision, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	if len(keys) != len(c.rules) {
		return nil, fmt.Errorf("%w: %d keys for %d rules", ErrInvalidKey, len(keys), len(c.rules))
	}
	checks := make([]Check, len(c.rules))
	for i, r := range c.rules {
		checks[i] = Check{Namespace: r.Name, Key: keys[i], Algorithm: r.Algorithm, Limit: r.Limit, Cost: n}
	}
	out := make([]Outcome, len(checks))
	ds := make([]Decision, len(checks))
	_, err := c.store.ApplyAll(ctx, checks, out)
	if err != nil {
		open := storeFailure(err) && ctx.Err() == nil
		for i, r := range c.rules {
			ds[i] = Decision{Rule: r.Name, Limit: r.Limit, ByPolicy: open}
			if open && r.OnFailure == FailOpen {
				ds[i].Allowed = true
			}
		}
		allOpen := open
		for _, d := range ds {
			allOpen = allOpen && d.Allowed
		}
		c.observe(ctx, keys, ds, err)
		if allOpen {
			return ds, nil
		}
		return ds, err
	}
	for i, r := range c.rules {
		ds[i] = decisionFrom(out[i], r.Name, r.Limit)
	}
	c.observe(ctx, keys, ds, nil)
	return ds, nil
}

// Reset makes keys[i] of every rule i fully available again.
func (c *Composite) Reset(ctx context.Context, keys ...string) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if len(keys) != len(c.rules) {
		return fmt.Errorf("%w: %d keys for %d rules", ErrInvalidKey, len(keys), len(c.rules))
	}
	for i, r := range c.rules {
		if err := c.store.Reset(ctx, r.Name, keys[i]); err != nil {
			return err
		}
	}
	return nil
}

// Close releases the embedded store if the composite created it.
func (c *Composite) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	if c.owned {
		return c.store.Close()
	}
	return nil
}

func (c *Composite) observe(ctx context.Context, keys []string, ds []Decision, err error) {
	if c.observer == nil {
		return
	}
	for i, d := range ds {
		c.observer.Observe(ctx, keys[i], d, err)
	}
}
