package latency

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BudgetCalls is how many calls RunBudget makes.
const BudgetCalls = 100

// MaxOverruns calls of BudgetCalls may pass the bound, by at most
// OverrunCap, while the process did not stall: a 2-core machine's
// scheduler and timer delays (CI saw 2 in 100, by 0.02-9.5 ms). A budget
// that does not hold makes nearly every call overrun.
const (
	MaxOverruns = 2
	OverrunCap  = 15 * time.Millisecond
)

// Budget is a run of calls that must each return within Bound.
type Budget struct {
	// Name says what is called, for messages: "fail-open", say.
	Name string
	// Deadline is each call's context deadline; 0 for none.
	Deadline time.Duration
	// Bound is how long a call may take: its budget (or the deadline, when
	// sooner) plus the slack the library promises.
	Bound time.Duration
	// Probe excuses the calls that were over Bound only because the
	// process could not run.
	Probe *Probe
}

// BudgetReport is what RunBudget measured.
type BudgetReport struct {
	Budget
	Took    []time.Duration // every call's latency
	Excused int             // calls over the bound during a stall of the process
}

// String says the median and the largest latency, how many calls were
// over the bound and how many of those the probe excused.
func (r BudgetReport) String() string {
	over := 0
	for _, d := range r.Took {
		if d > r.Bound {
			over++
		}
	}
	median, largest := Summary(r.Took)
	return fmt.Sprintf("%s: %d calls, p50 %s, max %s, %d over the bound %s (%d during a stall of the process)",
		r.label(), len(r.Took), median.Round(time.Microsecond), largest.Round(time.Microsecond), over, r.Bound, r.Excused)
}

// label is the budget's name and deadline, the prefix of its messages.
func (b Budget) label() string {
	dl := "none"
	if b.Deadline > 0 {
		dl = b.Deadline.String()
	}
	return fmt.Sprintf("%s, deadline %s", b.Name, dl)
}

// RunBudget makes BudgetCalls calls of call, each with a context of its
// own (t's, with b.Deadline when set), and times each. A call over
// b.Bound that the probe's stalls explain is excused; any other is an
// overrun, and t fails when one passes the bound by more than OverrunCap
// or when there are more than MaxOverruns. After each call, untimed,
// check(prefix, d, err) asserts what it returned, prefix naming the call
// for messages.
func RunBudget[D any](t testing.TB, b Budget, call func(context.Context) (D, error), check func(prefix string, d D, err error)) BudgetReport {
	t.Helper()
	r := BudgetReport{Budget: b, Took: make([]time.Duration, 0, BudgetCalls)}
	overruns := 0
	for i := range BudgetCalls {
		ctx, cancel := t.Context(), context.CancelFunc(func() {})
		if b.Deadline > 0 {
			ctx, cancel = context.WithTimeout(ctx, b.Deadline)
		}
		start := time.Now()
		d, err := call(ctx)
		end := time.Now()
		elapsed := end.Sub(start)
		cancel()
		r.Took = append(r.Took, elapsed)
		prefix := fmt.Sprintf("%s, call %d", b.label(), i)
		stalled := b.Probe.StalledDuring(start, end)
		if elapsed > b.Bound && elapsed-stalled <= b.Bound {
			r.Excused++ // the process could not run: the machine's delay, not the library's
		} else if elapsed > b.Bound {
			overruns++
			if elapsed > b.Bound+OverrunCap {
				t.Errorf("%s: answered after %s, want at most %s (+ %s for a rare overrun)", prefix, elapsed, b.Bound, OverrunCap)
			}
		}
		check(prefix, d, err)
	}
	if overruns > MaxOverruns {
		t.Errorf("%s: %d of %d calls past %s, want at most %d", b.label(), overruns, BudgetCalls, b.Bound, MaxOverruns)
	}
	return r
}
