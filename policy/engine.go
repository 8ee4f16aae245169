package policy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	sluice "github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms/catalog"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// Engine decides requests against a rule set. Decide is safe for
// concurrent use with itself and with Swap. Create one with New; the zero
// value is not usable. Close it when it has a Sink.
type Engine struct {
	state atomic.Pointer[engineState]
	mu    sync.Mutex // serialises Swap
	cfg   engineConfig
	queue *violationQueue // nil without a Sink
}

type engineState struct {
	set  *Set
	comp *sluice.Composite // nil when the set has no rules
}

// Result is the answer to Decide.
type Result struct {
	// Allowed is false only when a rule not in shadow mode denied the
	// request or failed closed.
	Allowed bool
	// Statuses has one status per request descriptor, in request order.
	Statuses []Status
}

// Status is what one request descriptor met.
type Status struct {
	// Matched reports that a rule applied to the descriptor. A rule
	// switched off by another's replaces does not apply.
	Matched bool
	// Unlimited reports that the rule (or its plan) is unlimited.
	Unlimited bool
	// Shadow reports that the rule is in shadow mode: its denial did not
	// deny the request.
	Shadow bool
	// Plan is the plan variant whose limit applied, empty for the base.
	Plan string
	// Decision is the rule's decision: Limit, Remaining, RetryAfter,
	// ResetAfter, Rule (its name) and ByPolicy.
	Decision sluice.Decision
}

// Option configures an Engine.
type Option func(*engineConfig) error

type engineConfig struct {
	opts      []sluice.Option
	sink      Sink
	queueSize int
	logger    *slog.Logger
}

// WithStore makes the engine keep its buckets in st; without it they are
// in the process-wide memory store.
func WithStore(st ratelimit.Store) Option {
	return func(c *engineConfig) error {
		c.opts = append(c.opts, sluice.WithStore(st))
		return nil
	}
}

// WithObserver calls fn after every rule's decision, as sluice.WithObserver
// does. A request whose shadow rules denied while its enforced rules
// admitted is decided twice (see docs/policy.md), and fn sees both.
func WithObserver(fn func(ctx context.Context, key string, d sluice.Decision, err error)) Option {
	return func(c *engineConfig) error {
		c.opts = append(c.opts, sluice.WithObserver(fn))
		return nil
	}
}

// WithSink sends every denial, shadow denials included, to s through a
// bounded queue of queueSize violations (0 for 4096) drained by one
// goroutine: Decide never waits for s, and a full queue drops the
// violation and counts it (Engine.DroppedViolations).
func WithSink(s Sink, queueSize int) Option {
	return func(c *engineConfig) error {
		if s == nil || queueSize < 0 {
			return fmt.Errorf("%w: nil sink or negative queue size", sluice.ErrInvalid)
		}
		c.sink, c.queueSize = s, queueSize
		return nil
	}
}

// WithLogger sets where the engine logs sink failures; slog.Default()
// without it.
func WithLogger(l *slog.Logger) Option {
	return func(c *engineConfig) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", sluice.ErrInvalid)
		}
		c.logger = l
		return nil
	}
}

// New returns an Engine enforcing set. Errors wrap sluice.ErrInvalid.
func New(set *Set, opts ...Option) (*Engine, error) {
	if set == nil {
		return nil, fmt.Errorf("%w: nil set", sluice.ErrInvalid)
	}
	e := &Engine{cfg: engineConfig{logger: slog.Default()}}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", sluice.ErrInvalid)
		}
		if err := o(&e.cfg); err != nil {
			return nil, err
		}
	}
	st := &engineState{set: set}
	if len(set.rules) > 0 {
		comp, err := sluice.NewComposite(sluiceRules(set), e.cfg.opts...)
		if err != nil {
			return nil, err
		}
		st.comp = comp
	} else if err := checkOptions(e.cfg.opts); err != nil {
		return nil, err
	}
	e.state.Store(st)
	if e.cfg.sink != nil {
		e.queue = newViolationQueue(e.cfg.sink, e.cfg.queueSize, e.cfg.logger)
	}
	return e, nil
}

// checkOptions validates opts when there is no rule to build a Composite
// of yet.
func checkOptions(opts []sluice.Option) error {
	alg, _ := catalog.ByName(DefaultAlgorithm)
	_, err := sluice.NewComposite([]sluice.Rule{{Name: "policy", Algorithm: alg, Limit: sluice.Unlimited()}}, opts...)
	return err
}

func sluiceRules(set *Set) []sluice.Rule {
	rules := make([]sluice.Rule, len(set.rules))
	for i, r := range set.rules {
		rules[i] = r.sluice
	}
	return rules
}

// Set returns the rule set in force.
func (e *Engine) Set() *Set { return e.state.Load().set }

// Swap puts set in force atomically: each Decide sees the old set or the
// new one, never a mix. A rule whose identity (its name) is in both keeps
// its buckets, even when its limit changes (no reset, no free burst); an
// algorithm change converts each bucket on first use. Removed rules stop
// applying. On error the set in force stays.
func (e *Engine) Swap(set *Set) error {
	if set == nil {
		return fmt.Errorf("%w: nil set", sluice.ErrInvalid)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	old := e.state.Load()
	next := &engineState{set: set}
	if len(set.rules) > 0 {
		var err error
		if old.comp != nil {
			next.comp, err = old.comp.WithRules(sluiceRules(set))
		} else {
			next.comp, err = sluice.NewComposite(sluiceRules(set), e.cfg.opts...)
		}
		if err != nil {
			return err
		}
	} else {
		next.comp = old.comp // keeps the store and the converters for later swaps
	}
	e.state.Store(next)
	return nil
}

// Close stops the violation queue after handing what it holds to the sink,
// or until ctx ends. Decide still works after Close but sends no
// violations.
func (e *Engine) Close(ctx context.Context) error {
	if e.queue == nil {
		return nil
	}
	return e.queue.close(ctx)
}

// DroppedViolations returns how many violations a full queue dropped.
func (e *Engine) DroppedViolations() uint64 {
	if e.queue == nil {
		return 0
	}
	return e.queue.dropped.Load()
}

// selected is one descriptor's rule in a Decide call.
type selected struct {
	status int // index in Result.Statuses
	rule   *rule
	key    string
	v      variant
}

// Decide decides hits units for the request descriptors of domain: each
// descriptor selects at most one rule, and the selected rules are decided
// as one atomic step (strictest wins; nothing is consumed on denial).
// hits 0 peeks. Errors wrap ErrUnknownDomain, sluice.ErrInvalid (no
// descriptors, an empty key or value, negative hits), or, from a rule that
// failed closed, sluice.ErrUnavailable or sluice.ErrUnknownOutcome; the
// caller's cancelled context returns its error.
func (e *Engine) Decide(ctx context.Context, domain string, descriptors []Descriptor, hits int64) (Result, error) {
	st := e.state.Load()
	root := st.set.domains[domain]
	if root == nil {
		return Result{}, fmt.Errorf("%w: %q", ErrUnknownDomain, domain)
	}
	if len(descriptors) == 0 {
		return Result{}, fmt.Errorf("%w: no descriptors", sluice.ErrInvalid)
	}
	if hits < 0 {
		return Result{}, fmt.Errorf("%w: negative hits %d", sluice.ErrInvalid, hits)
	}
	res := Result{Allowed: true, Statuses: make([]Status, len(descriptors))}
	var buf [8]selected
	sel := buf[:0]
	replacing := false
	for i, desc := range descriptors {
		if len(desc) == 0 {
			return Result{}, fmt.Errorf("%w: descriptor %d has no entries", sluice.ErrInvalid, i)
		}
		for _, en := range desc {
			if en.Key == "" || en.Value == "" {
				return Result{}, fmt.Errorf("%w: descriptor %d has an entry with an empty key or value", sluice.ErrInvalid, i)
			}
		}
		r, key, plan := match(root, desc)
		if r == nil {
			continue
		}
		v := r.base
		if pv, ok := r.plans[plan]; ok && plan != "" {
			v = pv
		}
		sel = append(sel, selected{status: i, rule: r, key: key, v: v})
		replacing = replacing || len(r.replaces) > 0
	}
	if replacing {
		sel = dropReplaced(sel)
	}
	if len(sel) == 0 {
		return res, nil
	}
	err := e.decide(ctx, st, sel, hits, &res)
	if e.queue != nil {
		e.report(domain, descriptors, sel, hits, &res)
	}
	return res, err
}

// dropReplaced removes the rules another selected rule replaces.
func dropReplaced(sel []selected) []selected {
	out := sel[:0]
	for _, s := range sel {
		replaced := false
		for _, o := range sel {
			if s.rule.named && contains(o.rule.replaces, s.rule.name) {
				replaced = true
				break
			}
		}
		if !replaced {
			out = append(out, s)
		}
	}
	return out
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// decide decides sel into res; see docs/policy.md for how shadow rules
// take part.
func (e *Engine) decide(ctx context.Context, st *engineState, sel []selected, hits int64, res *Result) error {
	var buf [8]sluice.Selection
	picks := buf[:0]
	var pickOf [8]int
	pickIdx := pickOf[:0] // index in sel of each pick
	shadows, blocked := 0, false
	for i := range sel {
		s := &sel[i]
		r := s.rule
		status := &res.Statuses[s.status]
		status.Matched, status.Shadow, status.Plan = true, r.shadow, s.v.plan
		status.Decision = sluice.Decision{Limit: s.v.limit, Rule: r.name}
		switch {
		case s.v.blocked:
			status.Decision.Limit = sluice.Limit{Period: s.v.limit.Period}
			status.Decision.RetryAfter = sluice.Never
			if !r.shadow {
				blocked = true
			}
			continue
		case s.v.limit.IsUnlimited():
			status.Unlimited = true
			status.Decision = sluice.Decision{Allowed: true, Remaining: 1<<63 - 1, Limit: s.v.limit, Rule: r.name}
			continue
		}
		if r.shadow {
			shadows++
		}
		p := sluice.Selection{Rule: r.index, Key: s.key}
		if s.v.plan != "" {
			p.Limit = s.v.limit
		}
		picks = append(picks, p)
		pickIdx = append(pickIdx, i)
	}
	if blocked {
		res.Allowed = false // a rule denying everything: nothing consumed
		return nil
	}
	if len(picks) == 0 {
		return nil
	}
	ds, err := st.comp.DecideSelected(ctx, hits, picks)
	if err != nil && !isPolicyFailure(err) {
		res.Allowed = false
		return err
	}
	enforcedOK, shadowOK, closed := true, true, false
	for j, d := range ds {
		s := &sel[pickIdx[j]]
		res.Statuses[s.status].Decision = d
		if s.rule.shadow {
			shadowOK = shadowOK && d.Allowed
		} else {
			enforcedOK = enforcedOK && d.Allowed
			closed = closed || (d.ByPolicy && !d.Allowed)
		}
	}
	switch {
	case !enforcedOK:
		res.Allowed = false
		if closed {
			return err // an enforced rule failed closed
		}
		return nil
	case err != nil: // the failure policies of the enforced rules admit
		return nil
	case shadowOK || shadows == len(picks):
		return nil
	}
	// Only shadow rules denied, so nothing was taken: take the request
	// from the enforced rules alone, which decide it.
	enforced := picks[:0:0]
	var idx []int
	for j, p := range picks {
		if !sel[pickIdx[j]].rule.shadow {
			enforced = append(enforced, p)
			idx = append(idx, pickIdx[j])
		}
	}
	ds, err = st.comp.DecideSelected(ctx, hits, enforced)
	if err != nil && !isPolicyFailure(err) {
		res.Allowed = false
		return err
	}
	for j, d := range ds {
		res.Statuses[sel[idx[j]].status].Decision = d
		res.Allowed = res.Allowed && d.Allowed
	}
	if res.Allowed {
		return nil
	}
	return err
}

// isPolicyFailure reports a store failure the rules' failure policies
// answered: the decisions are there, ByPolicy.
func isPolicyFailure(err error) bool {
	return errors.Is(err, sluice.ErrUnavailable) || errors.Is(err, sluice.ErrUnknownOutcome)
}

func (e *Engine) report(domain string, descriptors []Descriptor, sel []selected, hits int64, res *Result) {
	now := time.Now()
	for _, s := range sel {
		st := &res.Statuses[s.status]
		if st.Decision.Allowed || !st.Matched {
			continue
		}
		e.queue.push(Violation{
			Time:       now,
			Domain:     domain,
			Rule:       s.rule.name,
			Key:        s.key,
			Descriptor: slices.Clone(descriptors[s.status]), // the caller's may be reused
			Plan:       s.v.plan,
			Hits:       hits,
			Limit:      st.Decision.Limit,
			Remaining:  st.Decision.Remaining,
			RetryAfter: st.Decision.RetryAfter,
			Shadow:     st.Shadow,
			ByPolicy:   st.Decision.ByPolicy,
			Denied:     !res.Allowed,
		})
	}
}
