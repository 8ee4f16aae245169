package slidinglog_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms/slidinglog"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/algtest"
	"github.com/sluicehq/sluice/internal/model"
)

func newModel(l ratelimit.Limit) algtest.Model { return &model.SlidingLog{L: l} }

func TestName(t *testing.T) {
	if got := slidinglog.New().Name(); got != "slidinglog" {
		t.Fatalf("Name() = %q", got)
	}
}

func TestDecideTable(t *testing.T) {
	const t0 = int64(1_700_000_000_000_000_000)
	l := ratelimit.Limit{Count: 4, Period: time.Second, Burst: 4}
	steps := []struct {
		at   time.Duration
		cost int64
		want ratelimit.Outcome
	}{
		{0, 1, ratelimit.Outcome{Allowed: true, Changed: true, Remaining: 3, ResetAfter: time.Second, TTL: time.Second}},
		{0, 1, ratelimit.Outcome{Allowed: true, Changed: true, Remaining: 2, ResetAfter: time.Second, TTL: time.Second}},
		{300 * time.Millisecond, 2, ratelimit.Outcome{Allowed: true, Changed: true, Remaining: 0, ResetAfter: time.Second, TTL: time.Second}},
		// 1 fits when the two units at 0 expire; 3 fit when those at 0.3 s do.
		{500 * time.Millisecond, 1, ratelimit.Outcome{RetryAfter: 500 * time.Millisecond, ResetAfter: 800 * time.Millisecond, TTL: 800 * time.Millisecond}},
		{500 * time.Millisecond, 3, ratelimit.Outcome{RetryAfter: 800 * time.Millisecond, ResetAfter: 800 * time.Millisecond, TTL: 800 * time.Millisecond}},
		{500 * time.Millisecond, 5, ratelimit.Outcome{RetryAfter: ratelimit.Never, ResetAfter: 800 * time.Millisecond, TTL: 800 * time.Millisecond}},
		// The clock went back: treated as 0.3 s, waits measured from 0.1 s.
		{100 * time.Millisecond, 0, ratelimit.Outcome{RetryAfter: 900 * time.Millisecond, ResetAfter: 1200 * time.Millisecond, TTL: 1200 * time.Millisecond}},
		{time.Second, 2, ratelimit.Outcome{Allowed: true, Changed: true, Remaining: 0, ResetAfter: time.Second, TTL: time.Second}},
		{2 * time.Second, 0, ratelimit.Outcome{Allowed: true, Remaining: 4}},
	}
	alg := slidinglog.New()
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

// TestStateDropsExpired checks the log keeps only live entries and merges
// calls at the same instant.
func TestStateDropsExpired(t *testing.T) {
	l := ratelimit.PerSecond(100)
	alg := slidinglog.New()
	var state []byte
	for i := range 50 {
		var err error
		_, state, err = alg.Decide(state, int64(i)*int64(100*time.Millisecond), l, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	// Ten entries live: 9 + one byte each for delta and count, plus ten
	// more bytes since 10^8 ns needs four varint bytes for nine deltas.
	if want := 9 + 2 + 9*(4+1); len(state) != want {
		t.Fatalf("state is %d bytes, want %d", len(state), want)
	}
	_, merged, err := alg.Decide(state, 49*int64(100*time.Millisecond), l, 3, nil)
	if err != nil || len(merged) != len(state) {
		t.Fatalf("same-instant call grew the state from %d to %d bytes (%v)", len(state), len(merged), err)
	}
}

func TestModel(t *testing.T) {
	algtest.CompareModel(t, slidinglog.New(), newModel, []ratelimit.Op{ratelimit.OpTake}, true, 1)
}

func TestRules(t *testing.T) { algtest.Rules(t, slidinglog.New(), 3) }

func TestEdges(t *testing.T) { algtest.Edges(t, slidinglog.New()) }

func TestGarbage(t *testing.T) { algtest.Garbage(t, slidinglog.New(), slidinglog.Tag, 4) }

func TestAllocs(t *testing.T) { algtest.Allocs(t, slidinglog.New()) }

func TestCorruptState(t *testing.T) {
	for _, s := range [][]byte{
		{slidinglog.Tag},
		make([]byte, 11),
		{slidinglog.Tag, 0, 0, 0, 0, 0, 0, 0, 0},       // no entry
		{slidinglog.Tag, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, // count 0
		{slidinglog.Tag, 0, 0, 0, 0, 0, 0, 0, 0, 0x80}, // truncated varint
		{slidinglog.Tag, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 1, 1, 1}, // past MaxInt64
	} {
		_, out, err := slidinglog.New().Decide(s, 0, ratelimit.PerSecond(1), 1, nil)
		if !errors.Is(err, ratelimit.ErrCorruptState) || len(out) != 0 {
			t.Fatalf("state %x: %v", s, err)
		}
	}
}

func FuzzDecide(f *testing.F) { algtest.FuzzDecide(f, slidinglog.New()) }

func BenchmarkDecide(b *testing.B) {
	alg := slidinglog.New()
	l := ratelimit.PerSecond(100)
	now := int64(1_700_000_000_000_000_000)
	var state []byte
	for range 50 { // a log of 50 live entries
		now += int64(time.Millisecond)
		_, state, _ = alg.Decide(state, now, l, 1, nil)
	}
	dst := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		_, dst, _ = alg.Decide(state, now, l, 1, dst[:0])
	}
}

func TestRate(t *testing.T) { algtest.Rate(t, slidinglog.New(), algtest.RateLimits(), true) }

func TestValidateLimit(t *testing.T) {
	algtest.ValidateLimit(t, slidinglog.New(), append(algtest.Limits(), algtest.RateLimits()...))
}

// TestBurstAboveCount checks PerMinute(100).WithBurst(200): one window of
// two minutes admitting 200.
func TestBurstAboveCount(t *testing.T) {
	algtest.BurstAboveCount(t, slidinglog.New(), 30*time.Second, 30*time.Second)
}
