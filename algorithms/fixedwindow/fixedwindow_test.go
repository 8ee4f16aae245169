package fixedwindow_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms/fixedwindow"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/algtest"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/window"
)

func newModel(l ratelimit.Limit) algtest.Model { return &model.FixedWindow{L: l} }

func TestName(t *testing.T) {
	if got := fixedwindow.New().Name(); got != "fixedwindow" {
		t.Fatalf("Name() = %q", got)
	}
}

func TestDecideTable(t *testing.T) {
	const w = int64(1_700_000_000_000_000_000) // a multiple of 1 s
	l := ratelimit.Limit{Count: 3, Period: time.Second, Burst: 3}
	steps := []struct {
		at   time.Duration
		cost int64
		want ratelimit.Outcome
	}{
		{250 * time.Millisecond, 2, ratelimit.Outcome{Allowed: true, Changed: true, Remaining: 1, ResetAfter: 750 * time.Millisecond, TTL: 750 * time.Millisecond}},
		{500 * time.Millisecond, 2, ratelimit.Outcome{Remaining: 1, RetryAfter: 500 * time.Millisecond, ResetAfter: 500 * time.Millisecond, TTL: 500 * time.Millisecond}},
		{500 * time.Millisecond, 4, ratelimit.Outcome{Remaining: 1, RetryAfter: ratelimit.Never, ResetAfter: 500 * time.Millisecond, TTL: 500 * time.Millisecond}},
		{999999999, 1, ratelimit.Outcome{Allowed: true, Changed: true, Remaining: 0, ResetAfter: 1, TTL: 1}},
		{-time.Second, 0, ratelimit.Outcome{RetryAfter: 2 * time.Second, ResetAfter: 2 * time.Second, TTL: 2 * time.Second}}, // clock went back a window
		{time.Second, 3, ratelimit.Outcome{Allowed: true, Changed: true, Remaining: 0, ResetAfter: time.Second, TTL: time.Second}},
		{5 * time.Second, 0, ratelimit.Outcome{Allowed: true, Remaining: 3}},
	}
	alg := fixedwindow.New()
	var state []byte
	for i, s := range steps {
		got, next, err := alg.Decide(state, w+int64(s.at), l, s.cost, nil)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got != s.want {
			t.Fatalf("step %d:\n got %+v\nwant %+v", i, got, s.want)
		}
		state = next
	}
}

func TestChargeCarriesOver(t *testing.T) {
	const w = int64(1_700_000_000_000_000_000)
	l := ratelimit.PerSecond(2)
	alg := fixedwindow.New()
	o, s, err := alg.Charge(nil, w, l, 5, nil)
	if err != nil || o.Allowed || o.RetryAfter != 2*time.Second || o.ResetAfter != 3*time.Second || o.Remaining != 0 {
		t.Fatalf("charge 5 of 2: %+v %v", o, err)
	}
	// One window later 3 are still counted, two windows later 1.
	for _, c := range []struct {
		at        int64
		remaining int64
	}{{w + 1e9, 0}, {w + 2e9, 1}, {w + 3e9, 2}} {
		o, _, err := alg.Decide(s, c.at, l, 0, nil)
		if err != nil || o.Remaining != c.remaining {
			t.Fatalf("at %d: %+v %v, want remaining %d", c.at, o, err, c.remaining)
		}
	}
}

func TestModel(t *testing.T) {
	algtest.CompareModel(t, fixedwindow.New(), newModel, []ratelimit.Op{ratelimit.OpTake}, true, 1)
}

func TestModelWithCharge(t *testing.T) {
	algtest.CompareModel(t, fixedwindow.New(), newModel, []ratelimit.Op{ratelimit.OpTake, ratelimit.OpCharge}, true, 2)
}

func TestRules(t *testing.T) { algtest.Rules(t, fixedwindow.New(), 3) }

func TestEdges(t *testing.T) { algtest.Edges(t, fixedwindow.New()) }

func TestGarbage(t *testing.T) { algtest.Garbage(t, fixedwindow.New(), fixedwindow.Tag, 4) }

func TestAllocs(t *testing.T) { algtest.Allocs(t, fixedwindow.New()) }

func TestCorruptState(t *testing.T) {
	algtest.CorruptState(t, fixedwindow.New(), algtest.FixedCorrupt(fixedwindow.Tag, fixedwindow.StateLen))
}

func FuzzDecide(f *testing.F) { algtest.FuzzDecide(f, fixedwindow.New()) }

func BenchmarkDecide(b *testing.B) { algtest.BenchDecide(b, fixedwindow.New()) }

// TestMaxUsed checks the cap on a carried count: Burst per window of
// Burst·Period/Count over MaxWindowSpan plus one window, saturating at
// 2^62, and that a charge stops there.
func TestMaxUsed(t *testing.T) {
	span := ratelimit.MaxWindowSpan
	tests := []struct {
		l    ratelimit.Limit
		want int64
	}{
		{ratelimit.Limit{Count: 1, Period: span, Burst: 1}, 2},
		{ratelimit.Limit{Count: 5, Period: span / 2, Burst: 5}, 15},
		{ratelimit.Limit{Count: 10, Period: time.Second, Burst: 10}, 10 * (int64(span/time.Second) + 1)},
		{ratelimit.Limit{Count: 1 << 20, Period: time.Nanosecond, Burst: 1 << 20}, 1 << 62},
		// The window is Burst·Period/Count = span/2: three windows' worth.
		{ratelimit.Limit{Count: 1, Period: span / 4, Burst: 2}, 6},
	}
	for _, tt := range tests {
		if got := window.MaxUsed(tt.l); got != tt.want {
			t.Errorf("MaxUsed(%+v) = %d, want %d", tt.l, got, tt.want)
		}
	}
	l := ratelimit.Limit{Count: 5, Period: span / 2, Burst: 5}
	out, state, err := fixedwindow.New().Charge(nil, 0, l, 1000, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out.Allowed || out.Remaining != 0 {
		t.Errorf("charge of 1000 over a burst of 5: %+v, want no room left", out)
	}
	// The count was capped at MaxUsed: 15 units, three windows to clear.
	for k, want := range []bool{false, false, true} {
		now := int64(k+1) * int64(l.Period)
		d, _, err := fixedwindow.New().Decide(state, now, l, 5, nil)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != want {
			t.Errorf("window %d after the charge: allowed %v, want %v", k+1, d.Allowed, want)
		}
	}
}

func TestRate(t *testing.T) { algtest.Rate(t, fixedwindow.New(), algtest.RateLimits(), true) }

func TestValidateLimit(t *testing.T) {
	algtest.ValidateLimit(t, fixedwindow.New(), append(algtest.Limits(), algtest.RateLimits()...))
}

// TestBurstAboveCount checks PerMinute(100).WithBurst(200): one window of
// two minutes admitting 200.
func TestBurstAboveCount(t *testing.T) {
	algtest.BurstAboveCount(t, fixedwindow.New(), 30*time.Second, 30*time.Second)
}
