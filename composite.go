package sluice

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// Composite enforces several rules together, for example per IP, per user,
// per user and endpoint, and global. One call checks every rule in one
// atomic store step: the strictest rule decides, and nothing is taken from
// any rule unless every rule admits the request. All rules share one store.
//
// A Composite is safe for concurrent use and holds no resources of its own.
// The zero value is not usable.
type Composite struct {
	caller
	rules atomic.Pointer[[]*compiled]
	mu    sync.Mutex // serialises SetRule
}

// NewComposite returns a Composite of rules, which must have distinct
// names. It validates like New.
func NewComposite(rules []Rule, opts ...Option) (*Composite, error) {
	if len(rules) == 0 {
		return nil, fmt.Errorf("%w: a composite needs at least one rule", ratelimit.ErrInvalidRule)
	}
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	compiledRules := make([]*compiled, len(rules))
	seen := make(map[string]bool, len(rules))
	for i, rule := range rules {
		if compiledRules[i], err = compile(rule, cfg.store, nil); err != nil {
			return nil, err
		}
		if seen[rule.Name] {
			return nil, fmt.Errorf("%w: duplicate rule name %q", ratelimit.ErrInvalidRule, rule.Name)
		}
		seen[rule.Name] = true
	}
	c := &Composite{caller: caller{store: cfg.store, observe: cfg.observe}}
	c.rules.Store(&compiledRules)
	return c, nil
}

// AllowN checks n units against every rule, keys[i] being the key for the
// i-th rule, and returns the strictest rule's decision. When any rule
// denies, nothing is taken from any rule. Store failures are answered by
// the rules' failure policies, as for Limiter.AllowN: the request is
// allowed only when every rule that failed is fail-open.
func (c *Composite) AllowN(ctx context.Context, n int64, keys ...string) (Decision, error) {
	ds, err := c.Decide(ctx, n, keys...)
	if len(ds) == 0 {
		return Decision{}, err
	}
	best := 0
	for i := 1; i < len(ds); i++ {
		if stricter(&ds[i], &ds[best]) {
			best = i
		}
	}
	return ds[best], err
}

// Decide is AllowN returning every rule's decision, in rule order. When the
// composite is denied, the allowed rules' decisions describe what they
// would have admitted; nothing was taken from them.
func (c *Composite) Decide(ctx context.Context, n int64, keys ...string) ([]Decision, error) {
	rules := *c.rules.Load()
	if len(keys) != len(rules) {
		return nil, fmt.Errorf("%w: %d keys for %d rules", ratelimit.ErrInvalidKey, len(keys), len(rules))
	}
	ds := make([]Decision, len(rules))
	checks := make([]ratelimit.Check, 0, len(rules))
	limited := make([]int, 0, len(rules)) // rule index of each check
	var budget time.Duration
	for i, r := range rules {
		ck := ratelimit.Check{Namespace: r.Name, Key: keys[i], Algorithm: r.alg, Limit: r.Limit, Cost: n}
		if r.Limit.IsUnlimited() {
			if err := ck.ValidateRequest(); err != nil {
				return nil, fmt.Errorf("rule %q: %w", r.Name, err)
			}
			ds[i] = unlimited(&r.Rule)
			continue
		}
		checks = append(checks, ck)
		limited = append(limited, i)
		if r.budget > 0 && (budget == 0 || r.budget < budget) {
			budget = r.budget // the strictest rule's budget bounds the one store call
		}
	}
	if len(checks) == 0 {
		c.observeAll(ctx, keys, ds, nil)
		return ds, nil
	}
	out := make([]ratelimit.Outcome, len(checks))
	err := c.applyAll(ctx, budget, checks, out)
	if err == nil {
		for j, i := range limited {
			ds[i] = decisionOf(&out[j], &rules[i].Rule)
		}
		c.observeAll(ctx, keys, ds, nil)
		return ds, nil
	}
	policy, err := classify(ctx, err)
	if !policy {
		for _, i := range limited {
			ds[i] = Decision{Limit: rules[i].Limit, Rule: rules[i].Name}
		}
		c.observeAll(ctx, keys, ds, err)
		return ds, err
	}
	open := true
	for _, i := range limited {
		ds[i] = byPolicy(&rules[i].Rule)
		open = open && rules[i].FailOpen
	}
	c.observeAll(ctx, keys, ds, err)
	if open {
		return ds, nil
	}
	return ds, err
}

// SetRule replaces the rule named rule.Name, as Limiter.SetRule does.
// Errors wrap ErrInvalid, and then nothing changes.
func (c *Composite) SetRule(rule Rule) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	rules := *c.rules.Load()
	for i, prev := range rules {
		if prev.Name != rule.Name {
			continue
		}
		r, err := compile(rule, c.store, prev)
		if err != nil {
			return err
		}
		next := append([]*compiled(nil), rules...)
		next[i] = r
		c.rules.Store(&next)
		return nil
	}
	return fmt.Errorf("%w: the composite has no rule %q", ratelimit.ErrInvalidRule, rule.Name)
}

func (c *Composite) observeAll(ctx context.Context, keys []string, ds []Decision, err error) {
	if c.observe == nil {
		return
	}
	for i := range ds {
		c.observe(ctx, keys[i], ds[i], err)
	}
}
