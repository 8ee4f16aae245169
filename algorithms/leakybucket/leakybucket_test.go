package leakybucket_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms/leakybucket"
	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/algtest"
	"github.com/sluicehq/sluice/internal/model"
)

var allOps = []ratelimit.Op{ratelimit.OpTake, ratelimit.OpReserve, ratelimit.OpRefund, ratelimit.OpCharge}

func newModel(l ratelimit.Limit) algtest.Model { return &model.Bucket{L: l, Clamp: true, Queue: true} }

func TestName(t *testing.T) {
	if got := leakybucket.New().Name(); got != "leakybucket" {
		t.Fatalf("Name() = %q", got)
	}
}

func TestMeterTable(t *testing.T) {
	const t0 = int64(1_700_000_000_000_000_000)
	l := ratelimit.Limit{Count: 3, Period: time.Second, Burst: 4}
	steps := []struct {
		at   time.Duration
		cost int64
		want ratelimit.Outcome
	}{
		{0, 3, ratelimit.Outcome{Allowed: true, Changed: true, Remaining: 1, ResetAfter: time.Second, TTL: time.Second}},
		{0, 2, ratelimit.Outcome{Remaining: 1, RetryAfter: 333333334, ResetAfter: time.Second, TTL: time.Second}},
		{time.Second / 3, 2, ratelimit.Outcome{Remaining: 1, RetryAfter: 1, ResetAfter: 666666667, TTL: 666666667}},
		{333333334, 2, ratelimit.Outcome{Allowed: true, Changed: true, Remaining: 0, ResetAfter: 1333333333, TTL: 1333333333}},
		{0, 1, ratelimit.Outcome{RetryAfter: 666666667, ResetAfter: 1666666667, TTL: 1666666667}}, // clock went back
		{time.Hour, 0, ratelimit.Outcome{Allowed: true, Remaining: 4}},
	}
	alg := leakybucket.New()
	var state []byte
	for i, s := range steps {
		got, next, err := alg.Decide(state, t0+int64(s.at), l, s.cost, nil)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got != s.want {
			t.Fatalf("step %d:\n got %+v\nwant %+v", i, got, s.want)
		}
		state = next
	}
}

func TestQueueTable(t *testing.T) {
	const t0 = int64(1_000_000_000)
	l := ratelimit.Limit{Count: 2, Period: time.Second, Burst: 2}
	alg := leakybucket.New()
	steps := []struct {
		at      time.Duration
		cost    int64
		maxWait time.Duration
		want    ratelimit.Outcome
	}{
		{0, 2, 0, ratelimit.Outcome{Allowed: true, Changed: true, Remaining: 0, ResetAfter: time.Second, TTL: time.Second}},
		{0, 1, time.Second - 1, ratelimit.Outcome{RetryAfter: time.Second, ResetAfter: time.Second, TTL: time.Second}},
		{0, 1, time.Second, ratelimit.Outcome{Allowed: true, Changed: true, Delay: time.Second, ResetAfter: 1500 * time.Millisecond, TTL: 1500 * time.Millisecond}},
		{time.Second / 4, 2, 2 * time.Second, ratelimit.Outcome{Allowed: true, Changed: true, Delay: 1250 * time.Millisecond, ResetAfter: 2250 * time.Millisecond, TTL: 2250 * time.Millisecond}},
		{time.Second / 4, 3, time.Hour, ratelimit.Outcome{RetryAfter: ratelimit.Never, ResetAfter: 2250 * time.Millisecond, TTL: 2250 * time.Millisecond}},
		{time.Second / 4, 0, time.Hour, ratelimit.Outcome{RetryAfter: 1750 * time.Millisecond, ResetAfter: 2250 * time.Millisecond, TTL: 2250 * time.Millisecond}},
	}
	var state []byte
	for i, s := range steps {
		got, next, err := alg.Reserve(state, t0+int64(s.at), l, s.cost, s.maxWait, nil)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got != s.want {
			t.Fatalf("step %d:\n got %+v\nwant %+v", i, got, s.want)
		}
		state = next
	}
}

func TestRefundCharge(t *testing.T) {
	const t0 = int64(1_000_000_000)
	l := ratelimit.Limit{Count: 1, Period: time.Second, Burst: 2}
	alg := leakybucket.New()
	o, s, err := alg.Charge(nil, t0, l, 5, nil)
	if err != nil || o.Allowed || o.Remaining != 0 || o.RetryAfter != 4*time.Second || o.ResetAfter != 5*time.Second {
		t.Fatalf("charge above capacity: %+v %v", o, err)
	}
	o, s, err = alg.Refund(s, t0, l, 9, nil)
	if err != nil || !o.Allowed || o.Remaining != 2 || len(s) != 0 || o.TTL != 0 || !o.Changed {
		t.Fatalf("refund below empty: %+v %x %v", o, s, err)
	}
}

// TestMeterSameAsTokenBucket checks the meter admits exactly what the
// token bucket admits, with the same outcomes, for Decide, Refund and
// Charge.
func TestMeterSameAsTokenBucket(t *testing.T) {
	algtest.Differential(t, leakybucket.New(), tokenbucket.New(), []ratelimit.Op{ratelimit.OpTake, ratelimit.OpRefund, ratelimit.OpCharge}, 5)
}

func TestModel(t *testing.T) {
	algtest.CompareModel(t, leakybucket.New(), newModel, []ratelimit.Op{ratelimit.OpTake}, true, 1)
}

func TestModelAllOps(t *testing.T) {
	algtest.CompareModel(t, leakybucket.New(), newModel, allOps, true, 2)
}

func TestRules(t *testing.T) { algtest.Rules(t, leakybucket.New(), 3) }

func TestEdges(t *testing.T) { algtest.Edges(t, leakybucket.New()) }

func TestGarbage(t *testing.T) { algtest.Garbage(t, leakybucket.New(), leakybucket.Tag, 4) }

func TestAllocs(t *testing.T) { algtest.Allocs(t, leakybucket.New()) }

func TestCorruptState(t *testing.T) {
	algtest.CorruptState(t, leakybucket.New(), algtest.FixedCorrupt(leakybucket.Tag, leakybucket.StateLen))
}

func FuzzDecide(f *testing.F) { algtest.FuzzDecide(f, leakybucket.New()) }

func BenchmarkDecide(b *testing.B) { algtest.BenchDecide(b, leakybucket.New()) }

func TestRate(t *testing.T) { algtest.Rate(t, leakybucket.New(), algtest.RateLimits(), true) }

func TestValidateLimit(t *testing.T) {
	algtest.ValidateLimit(t, leakybucket.New(), append(algtest.Limits(), algtest.RateLimits()...))
}
