package sluice

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// Rule is a named limit enforced with one algorithm.
type Rule struct {
	// Name identifies the rule in decisions and names its buckets in the
	// store: limiters with the same rule name on one store share buckets.
	// 1..1024 bytes.
	Name string
	// Algorithm decides admission, for example gcra.New() from
	// github.com/sluicehq/sluice/algorithms/gcra.
	Algorithm ratelimit.Algorithm
	// Limit is the rate and the burst, or Unlimited().
	Limit Limit
	// FailOpen makes the rule allow, instead of deny, when its store fails
	// or does not answer within Budget. Either way the decision has
	// ByPolicy set; see the package documentation for the outcomes.
	FailOpen bool
	// Budget is how long one call may wait for the store before the
	// failure policy answers. 0 selects the store's default: 5 ms for a
	// remote store that states none, 25 ms for PostgreSQL. A store that
	// decides in process (the memory store, a gossip node) is never given
	// a deadline. A Composite's call waits the smallest budget of its
	// rules. Negative is invalid.
	Budget time.Duration
}

// defaultBudget is the Budget of rules that set none on a remote store:
// the seeds' added-latency target (P99 ≤ 5 ms).
const defaultBudget = 5 * time.Millisecond

// validate reports whether r is usable, wrapping ratelimit.ErrInvalidRule,
// ratelimit.ErrInvalidLimit or ratelimit.ErrInvalidOption.
func (r *Rule) validate() error {
	if r.Name == "" || len(r.Name) > ratelimit.MaxKeyLen {
		return fmt.Errorf("%w: name length %d outside 1..%d", ratelimit.ErrInvalidRule, len(r.Name), ratelimit.MaxKeyLen)
	}
	if r.Algorithm == nil {
		return fmt.Errorf("%w: rule %q has no algorithm", ratelimit.ErrInvalidRule, r.Name)
	}
	if r.Budget < 0 {
		return fmt.Errorf("%w: rule %q has a negative budget %s", ratelimit.ErrInvalidRule, r.Name, r.Budget)
	}
	return validateLimit(r.Name, r.Algorithm, r.Limit)
}

// validateLimit checks l for rule name under alg: Unlimited, or valid for
// the contract and for the algorithm.
func validateLimit(name string, alg ratelimit.Algorithm, l Limit) error {
	if l.IsUnlimited() {
		return nil
	}
	if err := l.Validate(); err != nil {
		return fmt.Errorf("rule %q: %w", name, err)
	}
	if v, ok := alg.(ratelimit.LimitValidator); ok {
		if err := v.ValidateLimit(l); err != nil {
			return fmt.Errorf("rule %q: %w", name, err)
		}
	}
	return nil
}

// compiled is a rule as a limiter applies it: immutable, swapped whole by
// SetRule so that every call sees one version of the rule.
type compiled struct {
	Rule
	// alg is Rule.Algorithm, or after an algorithm change a converter that
	// also reads the states the previous algorithms wrote.
	alg ratelimit.Algorithm
	// budget is the deadline of a store call, 0 for none.
	budget time.Duration
	// prep is alg under Limit ready for the memory store's hot path
	// (memstore.Prepare), or nil; a Limiter sets it.
	prep *memstore.Prepared
}

// compile validates r and prepares it for store st; prev is the version it
// replaces, nil for a new rule.
func compile(r Rule, st ratelimit.Store, prev *compiled) (*compiled, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	c := &compiled{Rule: r, alg: r.Algorithm, budget: r.Budget}
	storeBudget := defaultBudget
	if b, ok := st.(ratelimit.Budgeter); ok {
		storeBudget = b.DefaultBudget()
	}
	switch {
	case storeBudget == 0:
		c.budget = 0 // the store never waits on I/O: no deadline, no timer
	case c.budget == 0:
		c.budget = storeBudget
	}
	if prev != nil && prev.Algorithm.Name() != r.Algorithm.Name() {
		c.alg = converter{from: prev.alg, fromLimit: prev.Limit, to: r.Algorithm}
	} else if prev != nil {
		c.alg = prev.alg // keep converting older states, if prev did
		if conv, ok := c.alg.(converter); ok {
			conv.to = r.Algorithm
			c.alg = conv
		}
	}
	return c, nil
}

// converter decides with to while the store may still hold states that an
// earlier algorithm wrote: a state to cannot decode (ErrCorruptState) is
// read with from, under the limit from used, and replaced by the state
// to would have with the same units available. Outcomes report Changed
// relative to the converted state, so a denial or a peek leaves the old
// state in place, to be converted again next time. Its name differs from
// to's, so stores take their generic path and never run to's native
// program on a foreign state.
type converter struct {
	from      ratelimit.Algorithm
	fromLimit Limit
	to        ratelimit.Algorithm
}

func (c converter) Name() string { return c.to.Name() + "+converting" }

// convert returns state, or when to cannot decode it, the state to would
// have at now under l with as many units available as from sees.
func (c converter) convert(state []byte, now int64, l Limit) ([]byte, error) {
	if len(state) == 0 || c.fromLimit.IsUnlimited() {
		// An unlimited rule wrote nothing: what is there is older still.
		return state, nil
	}
	if _, _, err := c.to.Decide(state, now, l, 0, nil); !errors.Is(err, ratelimit.ErrCorruptState) {
		return state, nil
	}
	old, _, err := c.from.Decide(state, now, c.fromLimit, 0, nil)
	if err != nil {
		return nil, err
	}
	used := l.Burst - min(old.Remaining, l.Burst)
	if used <= 0 {
		return nil, nil
	}
	_, seeded, err := c.to.Decide(nil, now, l, used, nil)
	return seeded, err
}

func (c converter) Decide(state []byte, now int64, l Limit, cost int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	state, err := c.convert(state, now, l)
	if err != nil {
		return ratelimit.Outcome{}, dst[:0], err
	}
	return c.to.Decide(state, now, l, cost, dst)
}

func (c converter) Reserve(state []byte, now int64, l Limit, cost int64, maxWait time.Duration, dst []byte) (ratelimit.Outcome, []byte, error) {
	return c.apply(ratelimit.OpReserve, state, now, l, cost, maxWait, dst)
}

func (c converter) Refund(state []byte, now int64, l Limit, amount int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	return c.apply(ratelimit.OpRefund, state, now, l, amount, 0, dst)
}

func (c converter) Charge(state []byte, now int64, l Limit, amount int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	return c.apply(ratelimit.OpCharge, state, now, l, amount, 0, dst)
}

func (c converter) apply(op ratelimit.Op, state []byte, now int64, l Limit, cost int64, maxWait time.Duration, dst []byte) (ratelimit.Outcome, []byte, error) {
	state, err := c.convert(state, now, l)
	if err != nil {
		return ratelimit.Outcome{}, dst[:0], err
	}
	return ratelimit.Evaluate(c.to, op, state, now, l, cost, maxWait, dst)
}

func (c converter) ValidateLimit(l Limit) error {
	if v, ok := c.to.(ratelimit.LimitValidator); ok {
		return v.ValidateLimit(l)
	}
	return nil
}
