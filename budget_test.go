package sluice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms/gcra"
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
