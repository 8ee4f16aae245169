package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/fakeclock"
)

func newMem(t *testing.T) (*memstore.Store, *fakeclock.Clock) {
	t.Helper()
	clk := fakeclock.New()
	s, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, clk
}

func check(key string, l ratelimit.Limit, cost int64) ratelimit.Check {
	return ratelimit.Check{Namespace: "t", Key: key, Algorithm: gcra.New(), Limit: l, Cost: cost}
}

func TestMemoryStoreBurstAndRefill(t *testing.T) {
	s, clk := newMem(t)
	ctx := t.Context()
	l := ratelimit.PerSecond(10).WithBurst(5)
	for i := range 5 {
		o, err := s.Apply(ctx, check("k", l, 1))
		if err != nil || !o.Allowed {
			t.Fatalf("call %d: %+v, %v; want allowed", i, o, err)
		}
		if o.Remaining != int64(4-i) {
			t.Fatalf("call %d: remaining %d, want %d", i, o.Remaining, 4-i)
		}
	}
	o, err := s.Apply(ctx, check("k", l, 1))
	if err != nil || o.Allowed || o.RetryAfter != 100*time.Millisecond {
		t.Fatalf("6th call: %+v, %v; want denied with RetryAfter 100ms", o, err)
	}
	clk.Advance(o.RetryAfter - 1)
	if o, _ := s.Apply(ctx, check("k", l, 1)); o.Allowed {
		t.Fatalf("allowed 1ns before RetryAfter: %+v", o)
	}
	clk.Advance(1)
	if o, _ := s.Apply(ctx, check("k", l, 1)); !o.Allowed {
		t.Fatalf("denied at RetryAfter: %+v", o)
	}
}

func TestMemoryStoreZeroAllocs(t *testing.T) {
	s, _ := newMem(t)
	ctx := context.Background()
	c := check("hot", ratelimit.Every(time.Nanosecond, 1<<40), 1)
	if _, err := s.Apply(ctx, c); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := s.Apply(ctx, c); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Apply on an existing key: %v allocs/op, want 0", allocs)
	}
}

func TestMemoryStoreExactUnderContentionConcurrentSafe(t *testing.T) {
	s, _ := newMem(t)
	l := ratelimit.Every(1000*time.Hour, 1).WithBurst(100)
	admitsExactly(t, 100, func() (bool, error) {
		o, err := s.Apply(t.Context(), check("race", l, 1))
		return o.Allowed, err
	})
}

// admitsExactly runs take 10 times in each of 64 goroutines released at
// once, and fails unless exactly want calls are admitted, none failing.
func admitsExactly(t *testing.T, want int64, take func() (bool, error)) {
	t.Helper()
	var allowed, errs atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 64 {
		wg.Go(func() {
			<-start
			for range 10 {
				ok, err := take()
				if err != nil {
					errs.Add(1)
				} else if ok {
					allowed.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if allowed.Load() != want || errs.Load() != 0 {
		t.Fatalf("allowed %d errors %d, want exactly %d and 0", allowed.Load(), errs.Load(), want)
	}
}

func TestMemoryStoreReclaimsIdleKeys(t *testing.T) {
	clk := fakeclock.New()
	s, err := memstore.New(memstore.WithClock(clk), memstore.WithReclaimGrace(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	l := ratelimit.PerSecond(1000)
	for i := range 10000 {
		if _, err := s.Apply(t.Context(), check(fmt.Sprint("a", i), l, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if n := memstore.Keys(s); n != 10000 {
		t.Fatalf("Len = %d after 10000 keys, want 10000", n)
	}
	clk.Advance(time.Second) // every bucket is full again: expiry changes nothing
	for round := range 20 {
		for i := range 10000 {
			if _, err := s.Apply(t.Context(), check(fmt.Sprint("b", round, "-", i), l, 1)); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(time.Second)
	}
	// 210,000 keys were created; at most the last round's 10,000 are live.
	// Sweeping on insert keeps the total near the live set.
	if n := memstore.Keys(s); n > 25000 {
		t.Fatalf("Len = %d after churn, want bounded near the 10000 live keys", n)
	}
}

func TestMemoryStoreExpiredStateIsInitial(t *testing.T) {
	s, clk := newMem(t)
	l := ratelimit.PerSecond(1).WithBurst(2)
	for range 2 {
		if _, err := s.Apply(t.Context(), check("k", l, 1)); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(2 * time.Second)
	o, err := s.Apply(t.Context(), check("k", l, 0))
	if err != nil || o.Remaining != 2 {
		t.Fatalf("peek after TTL: %+v, %v; want remaining 2", o, err)
	}
}

func TestMemoryStoreBadInputChangesNothing(t *testing.T) {
	s, _ := newMem(t)
	ctx := t.Context()
	good := ratelimit.PerSecond(1).WithBurst(3)
	if _, err := s.Apply(ctx, check("k", good, 1)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		c    ratelimit.Check
		want error
	}{
		{"zero limit", check("k", ratelimit.Limit{}, 1), ratelimit.ErrInvalidLimit},
		{"negative cost", check("k", good, -1), ratelimit.ErrInvalidCost},
		{"huge cost", check("k", good, ratelimit.MaxCost+1), ratelimit.ErrInvalidCost},
		{"empty key", check("", good, 1), ratelimit.ErrInvalidKey},
		{"long key", check(strings.Repeat("x", ratelimit.MaxKeyLen+1), good, 1), ratelimit.ErrInvalidKey},
		{"1MB key", check(strings.Repeat("x", 1<<20), good, 1), ratelimit.ErrInvalidKey},
		{"nil algorithm", ratelimit.Check{Namespace: "t", Key: "k", Limit: good, Cost: 1}, ratelimit.ErrInvalidRule},
		{"corrupt state", ratelimit.Check{Namespace: "t", Key: "k", Algorithm: corrupt{}, Limit: good, Cost: 1}, ratelimit.ErrCorruptState},
		{"unsupported op", ratelimit.Check{Namespace: "t", Key: "k", Algorithm: corrupt{}, Limit: good, Cost: 1, Op: ratelimit.OpCharge}, ratelimit.ErrUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := s.Apply(ctx, tt.c); !errors.Is(err, tt.want) {
				t.Fatalf("Apply = %v, want %v", err, tt.want)
			}
			o, err := s.Apply(ctx, check("k", good, 0))
			if err != nil || o.Remaining != 2 {
				t.Fatalf("state changed: peek = %+v, %v; want remaining 2", o, err)
			}
		})
	}
}

// corrupt rejects any state as corrupt.
type corrupt struct{}

func (corrupt) Name() string { return "corrupt" }
func (corrupt) Decide(_ []byte, _ int64, _ ratelimit.Limit, _ int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	return ratelimit.Outcome{}, dst[:0], ratelimit.ErrCorruptState
}

func TestMemoryStoreKeysAreData(t *testing.T) {
	s, _ := newMem(t)
	l := ratelimit.Every(time.Hour, 1)
	keys := []string{"a", "a\x00", "a\r\nb", "{a}", "'; DROP TABLE x; --", "redis.call('FLUSHALL')", "\xff\xfe", "a:b", "A",
		// Keys of up to 16 bytes are held as their bytes padded with
		// zeros, and their length: trailing zeros make other keys.
		"\x00", "a\x00\x00\x00", "abcdefg", "abcdefg\x00", "abcdefgh\x00", "0123456789abcde", "0123456789abcde\x00", "0123456789abcde\x00\x00"}
	for _, k := range keys {
		o, err := s.Apply(t.Context(), check(k, l, 1))
		if err != nil || !o.Allowed {
			t.Fatalf("key %q: %+v %v; want its own fresh bucket", k, o, err)
		}
	}
	for _, k := range keys {
		if o, _ := s.Apply(t.Context(), check(k, l, 1)); o.Allowed {
			t.Fatalf("key %q: second call allowed; keys collided or state lost", k)
		}
	}
}

func TestMemoryStoreNamespacesIsolate(t *testing.T) {
	s, _ := newMem(t)
	l := ratelimit.Every(time.Hour, 1)
	a := check("k", l, 1)
	b := a
	b.Namespace = "other"
	for _, c := range []ratelimit.Check{a, b} {
		if o, err := s.Apply(t.Context(), c); err != nil || !o.Allowed {
			t.Fatalf("%s: %+v %v", c.Namespace, o, err)
		}
	}
}

func TestMemoryStoreApplyAllAllOrNothing(t *testing.T) {
	s, _ := newMem(t)
	ctx := t.Context()
	loose := ratelimit.Every(time.Hour, 10)
	tight := ratelimit.Every(time.Hour, 2)
	checks := []ratelimit.Check{check("user", loose, 1), check("global", tight, 1)}
	out := make([]ratelimit.Outcome, 2)
	for i := range 2 {
		ok, err := s.ApplyAll(ctx, checks, out)
		if err != nil || !ok {
			t.Fatalf("round %d: %v %v", i, ok, err)
		}
	}
	ok, err := s.ApplyAll(ctx, checks, out)
	if err != nil || ok || out[1].Allowed || !out[0].Allowed {
		t.Fatalf("third composite: ok=%v err=%v out=%+v; want denied by the tight rule", ok, err, out)
	}
	o, _ := s.Apply(ctx, check("user", loose, 0))
	if o.Remaining != 8 {
		t.Fatalf("user remaining %d, want 8: the denied composite consumed", o.Remaining)
	}
}

func TestMemoryStoreApplyAllSameKeyTwice(t *testing.T) {
	s, _ := newMem(t)
	l := ratelimit.Every(time.Hour, 3)
	out := make([]ratelimit.Outcome, 2)
	ok, err := s.ApplyAll(t.Context(), []ratelimit.Check{check("k", l, 2), check("k", l, 2)}, out)
	if err != nil || ok {
		t.Fatalf("2+2 on burst 3: ok=%v err=%v, want denied", ok, err)
	}
	ok, err = s.ApplyAll(t.Context(), []ratelimit.Check{check("k", l, 1), check("k", l, 2)}, out)
	if err != nil || !ok || out[1].Remaining != 0 {
		t.Fatalf("1+2 on burst 3: ok=%v err=%v out=%+v, want allowed leaving 0", ok, err, out)
	}
}

func TestMemoryStoreApplyAllNoDeadlockConcurrentSafe(t *testing.T) {
	s, _ := newMem(t)
	l := ratelimit.Every(time.Nanosecond, 1<<40)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			out := make([]ratelimit.Outcome, 3)
			for range 500 {
				a, b, c := fmt.Sprint(r.IntN(8)), fmt.Sprint(r.IntN(8)), fmt.Sprint(r.IntN(8))
				if _, err := s.ApplyAll(context.Background(), []ratelimit.Check{check(a, l, 1), check(b, l, 1), check(c, l, 1)}, out); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestMemoryStoreContextAndClose(t *testing.T) {
	s, _ := newMem(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Apply(ctx, check("k", ratelimit.PerSecond(1), 1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Apply(t.Context(), check("k", ratelimit.PerSecond(1), 1)); !errors.Is(err, ratelimit.ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
	if err := s.Reset(t.Context(), "t", "k"); !errors.Is(err, ratelimit.ErrClosed) {
		t.Fatalf("Reset after Close: %v, want ErrClosed", err)
	}
}

func BenchmarkMemoryStoreApply(b *testing.B) {
	s, err := memstore.New()
	if err != nil {
		b.Fatal(err)
	}
	c := ratelimit.Check{Namespace: "b", Key: "hot", Algorithm: gcra.New(), Limit: ratelimit.Every(time.Nanosecond, 1<<40), Cost: 1}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, _ = s.Apply(ctx, c)
	}
}

func TestMemoryStoreReclaimGrace(t *testing.T) {
	clk := fakeclock.New()
	s, err := memstore.New(memstore.WithClock(clk), memstore.WithReclaimGrace(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := ratelimit.PerSecond(1000)
	insert := func(prefix string, n int) {
		t.Helper()
		for i := range n {
			if _, err := s.Apply(t.Context(), check(fmt.Sprint(prefix, i), l, 1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	insert("a", 5000)
	clk.Advance(30 * time.Second) // expired, but within the grace
	insert("b", 5000)
	if n := memstore.Keys(s); n != 10000 {
		t.Fatalf("Len = %d, want 10000: keys inside the grace were reclaimed", n)
	}
	// Expired state is still never seen by decisions.
	if o, err := s.Apply(t.Context(), check("a0", l, 0)); err != nil || o.Remaining != 1000 {
		t.Fatalf("peek of an expired key inside the grace: %+v %v, want a full bucket", o, err)
	}
	clk.Advance(2 * time.Minute)
	for round := range 10 {
		insert(fmt.Sprint("c", round, "-"), 5000)
	}
	if n := memstore.Keys(s); n > 60000-5000 {
		t.Fatalf("Len = %d after the grace passed, want old keys reclaimed", n)
	}
	if _, err := memstore.New(memstore.WithReclaimGrace(-1)); !errors.Is(err, ratelimit.ErrInvalidOption) {
		t.Fatalf("negative grace: %v, want ErrInvalidOption", err)
	}
}

// BenchmarkMemoryStoreApplyAll measures a composite as a Composite sends
// it: a per-user and a global rule, each on its own namespace, plus a
// second check on the user's key.
func BenchmarkMemoryStoreApplyAll(b *testing.B) {
	s, err := memstore.New()
	if err != nil {
		b.Fatal(err)
	}
	l := ratelimit.Every(time.Nanosecond, 1<<40)
	checks := []ratelimit.Check{
		{Namespace: "user", Key: "alice", Algorithm: gcra.New(), Limit: l, Cost: 1},
		{Namespace: "global", Key: "all", Algorithm: gcra.New(), Limit: l, Cost: 1},
		{Namespace: "user", Key: "alice", Algorithm: gcra.New(), Limit: l, Cost: 1},
	}
	out := make([]ratelimit.Outcome, len(checks))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := s.ApplyAll(ctx, checks, out); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}
