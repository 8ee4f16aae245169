package latency_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/latency"
)

func TestStalledDuringCountsOnlyOverlaps(t *testing.T) {
	p := latency.Start()
	defer p.Stop()
	start := time.Now()
	time.Sleep(20 * time.Millisecond)
	// A quiet machine stalls rarely; whatever it recorded lies inside the
	// probe's life, so nothing can overlap an interval before it started.
	if d := p.StalledDuring(start.Add(-time.Hour), start.Add(-time.Minute)); d != 0 {
		t.Fatalf("stall of %s recorded before the probe started", d)
	}
	if d := p.StalledDuring(start, time.Now()); d > 20*time.Millisecond {
		t.Fatalf("stalled %s in a 20 ms interval", d)
	}
}

func TestSummary(t *testing.T) {
	med, largest := latency.Summary([]time.Duration{5, 1, 3})
	if med != 3 || largest != 5 {
		t.Fatalf("Summary = %d, %d; want 3, 5", med, largest)
	}
}

func TestRunBudgetChecksEveryCall(t *testing.T) {
	p := latency.Start()
	defer p.Stop()
	checked := 0
	r := latency.RunBudget(t, latency.Budget{Name: "instant", Deadline: time.Hour, Bound: time.Hour, Probe: p},
		func(ctx context.Context) (int, error) {
			if _, ok := ctx.Deadline(); !ok {
				t.Error("the call's context has no deadline")
			}
			return 7, nil
		},
		func(prefix string, d int, err error) {
			checked++
			if d != 7 || err != nil {
				t.Errorf("%s: check got %d, %v; want 7, nil", prefix, d, err)
			}
		})
	if checked != latency.BudgetCalls || len(r.Took) != latency.BudgetCalls {
		t.Fatalf("%d checks, %d latencies; want %d of each", checked, len(r.Took), latency.BudgetCalls)
	}
	if r.Excused != 0 {
		t.Fatalf("%d calls excused under an hour's bound", r.Excused)
	}
}
