package leakybucket_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms/internal/algtest"
	"github.com/sluicehq/sluice/algorithms/internal/model"
	"github.com/sluicehq/sluice/algorithms/leakybucket"
	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/core/ratelimit"
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

func TestZeroAllocs(t *testing.T) { algtest.ZeroAllocs(t, leakybucket.New()) }

func TestCorruptState(t *testing.T) {
	for _, s := range [][]byte{{leakybucket.Tag}, make([]byte, leakybucket.StateLen), append([]byte{leakybucket.Tag}, make([]byte, leakybucket.StateLen)...)} {
		_, out, err := leakybucket.New().Decide(s, 0, ratelimit.PerSecond(1), 1, nil)
		if !errors.Is(err, ratelimit.ErrCorruptState) || len(out) != 0 {
			t.Fatalf("state %x: %v", s, err)
		}
	}
}

func FuzzDecide(f *testing.F) {
	_, s, _ := leakybucket.New().Decide(nil, 1e18, ratelimit.PerSecond(10), 3, nil)
	f.Add(s, int64(1e18), int64(10), int64(time.Second), int64(10), int64(1))
	f.Add([]byte{}, int64(0), int64(1), int64(1), int64(1), int64(0))
	f.Fuzz(func(t *testing.T, state []byte, now, count, period, burst, cost int64) {
		l := ratelimit.Limit{Count: count, Period: time.Duration(period), Burst: burst}
		if l.Validate() != nil || cost < 0 || cost > ratelimit.MaxCost {
			return
		}
		o, out, err := leakybucket.New().Decide(state, now, l, cost, nil)
		if err != nil {
			if !errors.Is(err, ratelimit.ErrCorruptState) {
				t.Fatal(err)
			}
			return
		}
		if o.Remaining < 0 || o.Remaining > burst || o.RetryAfter < 0 || o.TTL < 0 || o.ResetAfter < 0 {
			t.Fatalf("insane outcome %+v", o)
		}
		if o.Allowed == (o.RetryAfter != 0) {
			t.Fatalf("Allowed %v with RetryAfter %s", o.Allowed, o.RetryAfter)
		}
		if (cost == 0 || !o.Allowed) && (o.Changed || !bytes.Equal(out, state)) {
			t.Fatalf("cost %d, allowed %v: state %x changed to %x", cost, o.Allowed, state, out)
		}
	})
}

func BenchmarkDecide(b *testing.B) {
	alg := leakybucket.New()
	l := ratelimit.PerSecond(1_000_000)
	now := int64(1_700_000_000_000_000_000)
	_, state, _ := alg.Decide(nil, now, l, 1, nil)
	dst := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		now += 1000
		_, dst, _ = alg.Decide(state, now, l, 1, dst[:0])
	}
}
