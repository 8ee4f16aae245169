package fixedwindow_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms/fixedwindow"
	"github.com/sluicehq/sluice/algorithms/internal/algtest"
	"github.com/sluicehq/sluice/algorithms/internal/model"
	"github.com/sluicehq/sluice/core/ratelimit"
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

func TestZeroAllocs(t *testing.T) { algtest.ZeroAllocs(t, fixedwindow.New()) }

func TestCorruptState(t *testing.T) {
	for _, s := range [][]byte{{fixedwindow.Tag}, make([]byte, fixedwindow.StateLen), append([]byte{fixedwindow.Tag}, make([]byte, fixedwindow.StateLen)...)} {
		_, out, err := fixedwindow.New().Decide(s, 0, ratelimit.PerSecond(1), 1, nil)
		if !errors.Is(err, ratelimit.ErrCorruptState) || len(out) != 0 {
			t.Fatalf("state %x: %v", s, err)
		}
	}
}

func FuzzDecide(f *testing.F) {
	_, s, _ := fixedwindow.New().Decide(nil, 1e18, ratelimit.PerSecond(10), 3, nil)
	f.Add(s, int64(1e18), int64(10), int64(time.Second), int64(10), int64(1))
	f.Add([]byte{}, int64(0), int64(1), int64(1), int64(1), int64(0))
	f.Fuzz(func(t *testing.T, state []byte, now, count, period, burst, cost int64) {
		l := ratelimit.Limit{Count: count, Period: time.Duration(period), Burst: burst}
		if l.Validate() != nil || cost < 0 || cost > ratelimit.MaxCost {
			return
		}
		o, out, err := fixedwindow.New().Decide(state, now, l, cost, nil)
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
	alg := fixedwindow.New()
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
