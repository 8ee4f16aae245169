package latency_test

import (
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
