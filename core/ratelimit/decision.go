package ratelimit

import (
	"fmt"
	"time"
)

// Decision is the result of a rate-limit check. It is a value: copying it
// is cheap and safe.
type Decision struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Limit is the limit of the rule that decided.
	Limit Limit
	// Remaining is how many units the deciding rule could still admit right
	// after this decision; never negative.
	Remaining int64
	// RetryAfter is how long to wait before the same request can pass: 0
	// when allowed, Never when the cost exceeds the burst and can never
	// pass. It is never early.
	RetryAfter time.Duration
	// ResetAfter is how long until the deciding rule is fully available
	// again if nothing else is taken.
	ResetAfter time.Duration
	// Delay is, for a reservation, how long to wait before acting; 0
	// otherwise.
	Delay time.Duration
	// Rule is the name of the rule that decided. For a composite it is the
	// strictest rule: the denying rule with the longest RetryAfter, or when
	// all allowed, the one with the fewest remaining units.
	Rule string
	// ByPolicy reports that the store failed and the rule's failure policy
	// (fail open or fail closed) decided instead of the store.
	ByPolicy bool
}

// String returns a one-line summary for logs.
func (d Decision) String() string {
	verdict := "denied"
	if d.Allowed {
		verdict = "allowed"
	}
	retry := d.RetryAfter.String()
	if d.RetryAfter == Never {
		retry = "never"
	}
	s := fmt.Sprintf("%s rule=%q limit=%s remaining=%d retry_after=%s reset_after=%s", verdict, d.Rule, d.Limit, d.Remaining, retry, d.ResetAfter)
	if d.ByPolicy {
		s += " by_policy"
	}
	return s
}

func decisionFrom(o Outcome, rule string, l Limit) Decision {
	return Decision{
		Allowed:    o.Allowed,
		Limit:      l,
		Remaining:  o.Remaining,
		RetryAfter: o.RetryAfter,
		ResetAfter: o.ResetAfter,
		Delay:      o.Delay,
		Rule:       rule,
	}
}

// stricter reports whether a should be reported instead of b in a composite.
func stricter(a, b Decision) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	if !a.Allowed {
		return a.RetryAfter > b.RetryAfter
	}
	if a.Delay != b.Delay {
		return a.Delay > b.Delay
	}
	return a.Remaining < b.Remaining
}
