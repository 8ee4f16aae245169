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
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	return newComposite(newCaller(cfg.store, cfg.observe), rules, nil)
}

// newComposite compiles rules for cl's store into a new Composite; a rule
// named in prev carries on from that version.
func newComposite(cl caller, rules []Rule, prev map[string]*compiled) (*Composite, error) {
	if len(rules) == 0 {
		return nil, fmt.Errorf("%w: a composite needs at least one rule", ratelimit.ErrInvalidRule)
	}
	compiledRules := make([]*compiled, len(rules))
	seen := make(map[string]bool, len(rules))
	for i, rule := range rules {
		var err error
		if compiledRules[i], err = compile(rule, cl.store, prev[rule.Name]); err != nil {
			return nil, err
		}
		if seen[rule.Name] {
			return nil, fmt.Errorf("%w: duplicate rule name %q", ratelimit.ErrInvalidRule, rule.Name)
		}
		seen[rule.Name] = true
	}
	c := &Composite{caller: cl}
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
	decided, err := c.decide(ctx, n, rules, keys, nil, ds)
	if !decided {
		return nil, err
	}
	return ds, err
}

// Selection picks one of a Composite's rules for DecideSelected.
type Selection struct {
	// Rule is the rule's index in the Composite, in NewComposite's order.
	Rule int
	// Key is the key of the rule's bucket.
	Key string
	// Limit, when not the zero Limit, replaces the rule's limit for this
	// call, as Limiter.AllowWithLimit does: the bucket stays the rule's.
	Limit Limit
}

// DecideSelected is Decide for the selected rules only, each with its key
// and optionally its own limit; the rules not selected are not touched.
// The selected rules are decided as one atomic step, like every rule of
// Decide: this is how a caller whose requests each match a different
// subset of rules (policy engines) keeps one Composite instead of one per
// subset. It writes the decisions to out in selection order, which must
// have len(out) >= len(sel), as Store.ApplyAll does: a caller deciding in
// a loop can reuse out. A rule selected twice with one key is applied
// twice, in order. Errors are Decide's; on an invalid selection out is
// untouched.
func (c *Composite) DecideSelected(ctx context.Context, n int64, sel []Selection, out []Decision) error {
	rules := *c.rules.Load()
	if len(sel) == 0 || len(out) < len(sel) {
		return fmt.Errorf("%w: %d rules selected, %d decisions of room", ratelimit.ErrInvalidRule, len(sel), len(out))
	}
	for i := range sel {
		s := &sel[i]
		if s.Rule < 0 || s.Rule >= len(rules) {
			return fmt.Errorf("%w: rule index %d outside 0..%d", ratelimit.ErrInvalidRule, s.Rule, len(rules)-1)
		}
		if s.Limit != (Limit{}) {
			if err := validateLimit(rules[s.Rule].Name, rules[s.Rule].Algorithm, s.Limit); err != nil {
				return err
			}
		}
	}
	_, err := c.decide(ctx, n, rules, nil, sel, out[:len(sel)])
	return err
}

// decide applies n to rules, writing the decisions to ds: each rule with
// keys[i] when sel is nil, otherwise the selected rules with their keys
// and limits. decided is false when a check was refused before any rule
// was decided; ds is then partly written.
func (c *Composite) decide(ctx context.Context, n int64, rules []*compiled, keys []string, sel []Selection, ds []Decision) (decided bool, _ error) {
	count := len(ds)
	checks := make([]ratelimit.Check, 0, count)
	limited := make([]int, 0, count) // decision index of each check
	var budget time.Duration
	for i := range count {
		r, key, limit := c.pick(rules, keys, sel, i)
		ck := ratelimit.Check{Namespace: r.Name, Key: key, Algorithm: r.alg, Limit: limit, Cost: n}
		if limit.IsUnlimited() {
			if err := ck.ValidateRequest(); err != nil {
				return false, fmt.Errorf("rule %q: %w", r.Name, err)
			}
			ds[i] = unlimited(&r.Rule)
			ds[i].Limit = limit
			continue
		}
		checks = append(checks, ck)
		limited = append(limited, i)
		if r.budget > 0 && (budget == 0 || r.budget < budget) {
			budget = r.budget // the strictest rule's budget bounds the one store call
		}
	}
	if len(checks) == 0 {
		c.observeAll(ctx, rules, keys, sel, ds, nil)
		return true, nil
	}
	out := make([]ratelimit.Outcome, len(checks))
	err := c.applyAll(ctx, budget, checks, out)
	if err == nil {
		for j, i := range limited {
			r, _, _ := c.pick(rules, keys, sel, i)
			ds[i] = decisionOf(&out[j], &r.Rule)
			ds[i].Limit = checks[j].Limit
		}
		c.observeAll(ctx, rules, keys, sel, ds, nil)
		return true, nil
	}
	policy, err := classify(ctx, err)
	if !policy {
		for j, i := range limited {
			r, _, _ := c.pick(rules, keys, sel, i)
			ds[i] = Decision{Limit: checks[j].Limit, Rule: r.Name}
		}
		c.observeAll(ctx, rules, keys, sel, ds, err)
		return true, err
	}
	open := true
	for j, i := range limited {
		r, _, _ := c.pick(rules, keys, sel, i)
		ds[i] = byPolicy(&r.Rule)
		ds[i].Limit = checks[j].Limit
		open = open && r.FailOpen
	}
	c.observeAll(ctx, rules, keys, sel, ds, err)
	if open {
		return true, nil
	}
	return true, err
}

// pick returns the rule, key and limit of the i-th decision of decide.
func (c *Composite) pick(rules []*compiled, keys []string, sel []Selection, i int) (*compiled, string, Limit) {
	if sel == nil {
		return rules[i], keys[i], rules[i].Limit
	}
	r := rules[sel[i].Rule]
	if sel[i].Limit == (Limit{}) {
		return r, sel[i].Key, r.Limit
	}
	return r, sel[i].Key, sel[i].Limit
}

// WithRules returns a new Composite of rules on c's store and observer,
// validated like NewComposite. A rule named like one of c's carries on
// from it as SetRule would (buckets kept; an algorithm change converts
// states on first use); c itself is unchanged and stays usable. Policy
// engines build each new rule set this way.
func (c *Composite) WithRules(rules []Rule) (*Composite, error) {
	prev := make(map[string]*compiled)
	for _, r := range *c.rules.Load() {
		prev[r.Name] = r
	}
	return newComposite(newCaller(c.store, c.observe), rules, prev)
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

func (c *Composite) observeAll(ctx context.Context, rules []*compiled, keys []string, sel []Selection, ds []Decision, err error) {
	if c.observe == nil {
		return
	}
	for i := range ds {
		_, key, _ := c.pick(rules, keys, sel, i)
		c.observe(ctx, key, ds[i], err)
	}
}
