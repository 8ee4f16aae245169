package slidingwindow_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms/slidingwindow"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/algtest"
	"github.com/sluicehq/sluice/internal/model"
)

func newModel(l ratelimit.Limit) algtest.Model { return &model.SlidingWindow{L: l} }

func TestName(t *testing.T) {
	if got := slidingwindow.New().Name(); got != "slidingwindow" {
		t.Fatalf("Name() = %q", got)
	}
}

func TestDecideTable(t *testing.T) {
	const w = int64(1_700_000_000_000_000_000) // a multiple of 1 s
	l := ratelimit.Limit{Count: 4, Period: time.Second, Burst: 4}
	steps := []struct {
		at   time.Duration
		cost int64
		want ratelimit.Outcome
	}{
		{500 * time.Millisecond, 3, ratelimit.Outcome{Allowed: true, Changed: true, Remaining: 1, ResetAfter: 1500 * time.Millisecond, TTL: 1500 * time.Millisecond}},
		{900 * time.Millisecond, 2, ratelimit.Outcome{Remaining: 1, RetryAfter: 100*time.Millisecond + 333333334, ResetAfter: 1100 * time.Millisecond, TTL: 1100 * time.Millisecond}},
		{900 * time.Millisecond, 5, ratelimit.Outcome{Remaining: 1, RetryAfter: ratelimit.Never, ResetAfter: 1100 * time.Millisecond, TTL: 1100 * time.Millisecond}},
		// 1.1 s: estimate = 0 + ceil(3·0.9) = 3.
		{1100 * time.Millisecond, 1, ratelimit.Outcome{Allowed: true, Changed: true, Remaining: 0, ResetAfter: 1900 * time.Millisecond, TTL: 1900 * time.Millisecond}},
		// 1.1 s: 3 more fit at 2 s, where the estimate is ceil(1·1) = 1.
		{1100 * time.Millisecond, 3, ratelimit.Outcome{RetryAfter: 900 * time.Millisecond, ResetAfter: 1900 * time.Millisecond, TTL: 1900 * time.Millisecond}},
		// 1 fits once ceil(3·(1 s−y)/1 s) <= 4−1−1, y >= 1 s − floor(2 s/3) = 333333334 ns.
		{1100 * time.Millisecond, 1, ratelimit.Outcome{RetryAfter: 333333334 - 100*time.Millisecond, ResetAfter: 1900 * time.Millisecond, TTL: 1900 * time.Millisecond}},
		// The clock went back to 0.1 s: treated as 1 s, waits measured from 0.1 s.
		{100 * time.Millisecond, 0, ratelimit.Outcome{RetryAfter: 333333334 + 900*time.Millisecond, ResetAfter: 2900 * time.Millisecond, TTL: 2900 * time.Millisecond}},
		{3 * time.Second, 4, ratelimit.Outcome{Allowed: true, Changed: true, Remaining: 0, ResetAfter: 2 * time.Second, TTL: 2 * time.Second}},
	}
	alg := slidingwindow.New()
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

func TestChargeOverQuota(t *testing.T) {
	const w = int64(1_700_000_000_000_000_000)
	l := ratelimit.PerSecond(2)
	alg := slidingwindow.New()
	o, s, err := alg.Charge(nil, w, l, 5, nil)
	// One unit passes once ceil(5·(1−y)) <= 1, y >= 0.8 s into the next window.
	if err != nil || o.Allowed || o.RetryAfter != 1800*time.Millisecond || o.ResetAfter != 2*time.Second || o.Remaining != 0 {
		t.Fatalf("charge 5 of 2: %+v %v", o, err)
	}
	if o, _, _ := alg.Decide(s, w+int64(1800*time.Millisecond)-1, l, 1, nil); o.Allowed {
		t.Fatalf("admitted 1 ns early: %+v", o)
	}
	if o, _, _ := alg.Decide(s, w+int64(1800*time.Millisecond), l, 1, nil); !o.Allowed {
		t.Fatalf("denied after RetryAfter: %+v", o)
	}
}

func TestModel(t *testing.T) {
	algtest.CompareModel(t, slidingwindow.New(), newModel, []ratelimit.Op{ratelimit.OpTake}, true, 1)
}

func TestModelWithCharge(t *testing.T) {
	algtest.CompareModel(t, slidingwindow.New(), newModel, []ratelimit.Op{ratelimit.OpTake, ratelimit.OpCharge}, true, 2)
}

func TestRules(t *testing.T) { algtest.Rules(t, slidingwindow.New(), 3) }

func TestEdges(t *testing.T) { algtest.Edges(t, slidingwindow.New()) }

func TestGarbage(t *testing.T) { algtest.Garbage(t, slidingwindow.New(), slidingwindow.Tag, 4) }

func TestAllocs(t *testing.T) { algtest.Allocs(t, slidingwindow.New()) }

func TestCorruptState(t *testing.T) {
	algtest.CorruptState(t, slidingwindow.New(), algtest.FixedCorrupt(slidingwindow.Tag, slidingwindow.StateLen))
}

func FuzzDecide(f *testing.F) { algtest.FuzzDecide(f, slidingwindow.New()) }

func BenchmarkDecide(b *testing.B) { algtest.BenchDecide(b, slidingwindow.New()) }

// TestRate bounds admission from above only: the weighted estimate rounds
// up, so a greedy client gets about Burst−1 per window (half for Burst 1).
func TestRate(t *testing.T) { algtest.Rate(t, slidingwindow.New(), algtest.RateLimits(), false) }

func TestValidateLimit(t *testing.T) {
	algtest.ValidateLimit(t, slidingwindow.New(), append(algtest.Limits(), algtest.RateLimits()...))
}

// TestBurstAboveCount checks PerMinute(100).WithBurst(200): one window of
// two minutes admitting 200.
func TestBurstAboveCount(t *testing.T) {
	algtest.BurstAboveCount(t, slidingwindow.New(), 30*time.Second+600*time.Millisecond, 150*time.Second)
}
