package tokenbucket_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/algtest"
	"github.com/sluicehq/sluice/internal/model"
)

var allOps = []ratelimit.Op{ratelimit.OpTake, ratelimit.OpReserve, ratelimit.OpRefund, ratelimit.OpCharge}

func newModel(l ratelimit.Limit) algtest.Model { return &model.Bucket{L: l, Clamp: true} }

func TestName(t *testing.T) {
	if got := tokenbucket.New().Name(); got != "tokenbucket" {
		t.Fatalf("Name() = %q", got)
	}
}

func TestDecideTable(t *testing.T) {
	const t0 = int64(1_700_000_000_000_000_000)
	l := ratelimit.Limit{Count: 3, Period: time.Second, Burst: 4}
	steps := []struct {
		at   time.Duration
		cost int64
		want ratelimit.Outcome
	}{
		{0, 4, ratelimit.Outcome{Allowed: true, Changed: true, Remaining: 0, ResetAfter: 1333333334, TTL: 1333333334}},
		{0, 1, ratelimit.Outcome{RetryAfter: 333333334, ResetAfter: 1333333334, TTL: 1333333334}},
		{333333333, 1, ratelimit.Outcome{RetryAfter: 1, ResetAfter: 1000000001, TTL: 1000000001}},
		{333333334, 0, ratelimit.Outcome{Allowed: true, Remaining: 1, ResetAfter: 1000000000, TTL: 1000000000}},
		{333333334, 1, ratelimit.Outcome{Allowed: true, Changed: true, Remaining: 0, ResetAfter: 1333333333, TTL: 1333333333}},
		{time.Second, 2, ratelimit.Outcome{Allowed: true, Changed: true, Remaining: 0, ResetAfter: 1333333334, TTL: 1333333334}},
		{time.Second, 5, ratelimit.Outcome{RetryAfter: ratelimit.Never, ResetAfter: 1333333334, TTL: 1333333334}},
		{time.Second / 2, 1, ratelimit.Outcome{RetryAfter: 833333334, ResetAfter: 1833333334, TTL: 1833333334}}, // clock went back 0.5 s
		{10 * time.Second, 0, ratelimit.Outcome{Allowed: true, Remaining: 4}},
	}
	alg := tokenbucket.New()
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

func TestReserveRefundCharge(t *testing.T) {
	const t0 = int64(1_000_000_000)
	l := ratelimit.Limit{Count: 1, Period: time.Second, Burst: 2}
	alg := tokenbucket.New()
	o, s, err := alg.Reserve(nil, t0, l, 2, 0, nil)
	if err != nil || !o.Allowed || o.Delay != 0 {
		t.Fatalf("reserve full: %+v %v", o, err)
	}
	o, s2, err := alg.Reserve(s, t0, l, 1, 500*time.Millisecond, nil)
	if err != nil || o.Allowed || o.RetryAfter != time.Second || o.Changed || string(s2) != string(s) {
		t.Fatalf("reserve over maxWait: %+v %v", o, err)
	}
	o, s, err = alg.Reserve(s, t0, l, 1, time.Second, nil)
	if err != nil || !o.Allowed || o.Delay != time.Second || o.Remaining != 0 || o.ResetAfter != 3*time.Second {
		t.Fatalf("reserve in debt: %+v %v", o, err)
	}
	o, s, err = alg.Refund(s, t0, l, 5, nil)
	if err != nil || !o.Allowed || o.Remaining != 2 || len(s) != 0 || o.TTL != 0 {
		t.Fatalf("refund above full: %+v %x %v", o, s, err)
	}
	o, s, err = alg.Charge(s, t0, l, 5, nil)
	if err != nil || o.Allowed || o.Remaining != 0 || o.RetryAfter != 4*time.Second || o.ResetAfter != 5*time.Second {
		t.Fatalf("charge into debt: %+v %v", o, err)
	}
	if o, _, _ := alg.Decide(s, t0+int64(4*time.Second), l, 1, nil); !o.Allowed {
		t.Fatalf("debt not repaid after RetryAfter: %+v", o)
	}
}

func TestModel(t *testing.T) {
	algtest.CompareModel(t, tokenbucket.New(), newModel, []ratelimit.Op{ratelimit.OpTake}, true, 1)
}

func TestModelAllOps(t *testing.T) {
	algtest.CompareModel(t, tokenbucket.New(), newModel, allOps, true, 2)
}

func TestRules(t *testing.T) { algtest.Rules(t, tokenbucket.New(), 3) }

func TestEdges(t *testing.T) { algtest.Edges(t, tokenbucket.New()) }

func TestGarbage(t *testing.T) { algtest.Garbage(t, tokenbucket.New(), tokenbucket.Tag, 4) }

func TestAllocs(t *testing.T) { algtest.Allocs(t, tokenbucket.New()) }

func TestCorruptState(t *testing.T) {
	algtest.CorruptState(t, tokenbucket.New(), algtest.FixedCorrupt(0x11, tokenbucket.StateLen))
}

func FuzzDecide(f *testing.F) { algtest.FuzzDecide(f, tokenbucket.New()) }

func BenchmarkDecide(b *testing.B) { algtest.BenchDecide(b, tokenbucket.New()) }

func TestRate(t *testing.T) { algtest.Rate(t, tokenbucket.New(), algtest.RateLimits(), true) }

func TestValidateLimit(t *testing.T) {
	algtest.ValidateLimit(t, tokenbucket.New(), append(algtest.Limits(), algtest.RateLimits()...))
}
