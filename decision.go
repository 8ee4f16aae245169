package sluice

import (
	"math"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// Decision is the answer to a rate-limit call. It is a value: copying it is
// cheap and safe. Denial is a Decision with Allowed false, never an error.
type Decision struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Remaining is how many units the deciding rule could still admit right
	// after this decision; never negative.
	Remaining int64
	// RetryAfter is how long to wait before the same request can pass: 0
	// when allowed, Never when the cost exceeds the burst. It is never early.
	RetryAfter time.Duration
	// ResetAfter is how long until the deciding rule is fully available
	// again if nothing else is taken.
	ResetAfter time.Duration
	// Limit is the limit of the rule that decided.
	Limit Limit
	// Rule is the name of the rule that decided. For a Composite it is the
	// strictest rule: the denying rule with the longest RetryAfter, or when
	// all allowed, the one with the fewest units remaining.
	Rule string
	// ByPolicy reports that the store failed or did not answer within the
	// rule's budget, and the rule's failure policy decided instead.
	ByPolicy bool
}

func decisionOf(o *ratelimit.Outcome, r *Rule) Decision {
	return Decision{
		Allowed:    o.Allowed,
		Remaining:  o.Remaining,
		RetryAfter: o.RetryAfter,
		ResetAfter: o.ResetAfter,
		Limit:      r.Limit,
		Rule:       r.Name,
	}
}

// unlimited is the decision for a rule whose limit is Unlimited.
func unlimited(r *Rule) Decision {
	return Decision{Allowed: true, Remaining: math.MaxInt64, Limit: r.Limit, Rule: r.Name}
}

// byPolicy is the decision of r's failure policy.
func byPolicy(r *Rule) Decision {
	return Decision{Allowed: r.FailOpen, Limit: r.Limit, Rule: r.Name, ByPolicy: true}
}

// stricter reports whether a should be reported instead of b in a composite.
func stricter(a, b *Decision) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	if !a.Allowed {
		return a.RetryAfter > b.RetryAfter
	}
	return a.Remaining < b.Remaining
}
