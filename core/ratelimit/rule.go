package ratelimit

import (
	"context"
	"errors"
	"fmt"
)

// FailurePolicy decides what a rule answers when its store fails with
// ErrUnavailable, ErrUnknownOutcome or a store deadline.
type FailurePolicy uint8

const (
	// FailClosed denies and returns the store error (the zero value).
	FailClosed FailurePolicy = iota
	// FailOpen allows, marks the decision ByPolicy and returns no error;
	// the Observer still sees the store error.
	FailOpen
)

// Rule is a named limit enforced with one algorithm.
type Rule struct {
	// Name identifies the rule in decisions and namespaces its keys in the
	// store, so two rules never share state. 1..MaxKeyLen bytes.
	Name string
	// Algorithm decides admission, for example gcra.New().
	Algorithm Algorithm
	// Limit is the rate and burst.
	Limit Limit
	// OnFailure is what to answer when the store fails; FailClosed by
	// default.
	OnFailure FailurePolicy
}

// Validate reports whether r is usable, wrapping ErrInvalidRule or
// ErrInvalidLimit.
func (r Rule) Validate() error {
	if r.Name == "" || len(r.Name) > MaxKeyLen {
		return fmt.Errorf("%w: name length %d outside 1..%d", ErrInvalidRule, len(r.Name), MaxKeyLen)
	}
	if r.Algorithm == nil {
		return fmt.Errorf("%w: rule %q has no algorithm", ErrInvalidRule, r.Name)
	}
	if r.OnFailure > FailOpen {
		return fmt.Errorf("%w: rule %q has unknown failure policy %d", ErrInvalidRule, r.Name, r.OnFailure)
	}
	if err := r.Limit.Validate(); err != nil {
		return fmt.Errorf("rule %q: %w", r.Name, err)
	}
	return nil
}

// storeFailure reports whether err is a store failure a policy may mask.
func storeFailure(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrUnknownOutcome) || errors.Is(err, context.DeadlineExceeded)
}
