package sluice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// A caller whose deadline passed before the call never reaches the store:
// the policy answers with ErrUnavailable (nothing was applied), not
// ErrUnknownOutcome.
func TestExpiredDeadlineIsUnavailable(t *testing.T) {
	ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel()
	for _, open := range []bool{true, false} {
		rule := sluice.Rule{Name: "r", Algorithm: gcra.New(), Limit: sluice.PerSecond(1), FailOpen: open, Budget: time.Second}
		lim, err := sluice.New(rule, sluice.WithStore(stalled{}))
		if err != nil {
			t.Fatal(err)
		}
		comp, err := sluice.NewComposite([]sluice.Rule{rule}, sluice.WithStore(stalled{}))
		if err != nil {
			t.Fatal(err)
		}
		for name, call := range map[string]func() (sluice.Decision, error){
			"limiter":   func() (sluice.Decision, error) { return lim.Allow(ctx, "k") },
			"composite": func() (sluice.Decision, error) { return comp.AllowN(ctx, 1, "k") },
		} {
			d, err := call()
			if !d.ByPolicy || d.Allowed != open {
				t.Errorf("%s, open %v: %+v, want a policy decision", name, open, d)
			}
			if !open && (!errors.Is(err, sluice.ErrUnavailable) || errors.Is(err, sluice.ErrUnknownOutcome) || !errors.Is(err, context.DeadlineExceeded)) {
				t.Errorf("%s, fail-closed: error %v, want ErrUnavailable wrapping the deadline", name, err)
			}
			if open && err != nil {
				t.Errorf("%s, fail-open: error %v, want nil", name, err)
			}
		}
	}
}

// deadlined is a store with the DeadlineApplier capability that records
// the deadline of each call and answers an allowed outcome; its Apply and
// ApplyAll fail, so a call that took the context path shows.
type deadlined struct {
	stalled
	deadlines chan time.Time
}

func (s deadlined) ApplyBefore(_ context.Context, deadline time.Time, _ ratelimit.Check) (ratelimit.Outcome, error) {
	s.deadlines <- deadline
	return ratelimit.Outcome{Allowed: true}, nil
}

func (s deadlined) ApplyAllBefore(_ context.Context, deadline time.Time, _ []ratelimit.Check, out []ratelimit.Outcome) (bool, error) {
	s.deadlines <- deadline
	for i := range out {
		out[i] = ratelimit.Outcome{Allowed: true}
	}
	return true, nil
}

func (deadlined) Apply(context.Context, ratelimit.Check) (ratelimit.Outcome, error) {
	return ratelimit.Outcome{}, errors.New("Apply called on a DeadlineApplier")
}

func (deadlined) ApplyAll(context.Context, []ratelimit.Check, []ratelimit.Outcome) (bool, error) {
	return false, errors.New("ApplyAll called on a DeadlineApplier")
}

// A store with the DeadlineApplier capability gets the rule's budget as a
// deadline value, now plus the budget, from a Limiter and a Composite.
func TestBudgetAsDeadlineValue(t *testing.T) {
	st := deadlined{deadlines: make(chan time.Time, 1)}
	rule := sluice.Rule{Name: "r", Algorithm: gcra.New(), Limit: sluice.PerSecond(1), Budget: 300 * time.Millisecond}
	lim, err := sluice.New(rule, sluice.WithStore(st))
	if err != nil {
		t.Fatal(err)
	}
	comp, err := sluice.NewComposite([]sluice.Rule{rule}, sluice.WithStore(st))
	if err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() (sluice.Decision, error){
		"limiter":   func() (sluice.Decision, error) { return lim.Allow(t.Context(), "k") },
		"composite": func() (sluice.Decision, error) { return comp.AllowN(t.Context(), 1, "k") },
	} {
		before := time.Now()
		d, err := call()
		after := time.Now()
		if err != nil || !d.Allowed || d.ByPolicy {
			t.Fatalf("%s: %+v, %v, want the store's decision", name, d, err)
		}
		deadline := <-st.deadlines
		if deadline.Before(before.Add(rule.Budget)) || deadline.After(after.Add(rule.Budget)) {
			t.Errorf("%s: deadline %s after the call began, want the budget %s", name, deadline.Sub(before), rule.Budget)
		}
	}
}
