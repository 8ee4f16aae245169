package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

func newLimiter(t *testing.T, l ratelimit.Limit, opts ...ratelimit.Option) *ratelimit.Limiter {
	t.Helper()
	lim, err := ratelimit.New(ratelimit.Rule{Name: "api", Algorithm: tat{}, Limit: l}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	return lim
}

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name string
		rule ratelimit.Rule
		opts []ratelimit.Option
		want error
	}{
		{"no name", ratelimit.Rule{Algorithm: tat{}, Limit: ratelimit.PerSecond(1)}, nil, ratelimit.ErrInvalidRule},
		{"no algorithm", ratelimit.Rule{Name: "r", Limit: ratelimit.PerSecond(1)}, nil, ratelimit.ErrInvalidRule},
		{"bad limit", ratelimit.Rule{Name: "r", Algorithm: tat{}}, nil, ratelimit.ErrInvalidLimit},
		{"bad policy", ratelimit.Rule{Name: "r", Algorithm: tat{}, Limit: ratelimit.PerSecond(1), OnFailure: 7}, nil, ratelimit.ErrInvalidRule},
		{"nil store", ratelimit.Rule{Name: "r", Algorithm: tat{}, Limit: ratelimit.PerSecond(1)}, []ratelimit.Option{ratelimit.WithStore(nil)}, ratelimit.ErrInvalidOption},
		{"nil option", ratelimit.Rule{Name: "r", Algorithm: tat{}, Limit: ratelimit.PerSecond(1)}, []ratelimit.Option{nil}, ratelimit.ErrInvalidOption},
		{"clock with store", ratelimit.Rule{Name: "r", Algorithm: tat{}, Limit: ratelimit.PerSecond(1)}, []ratelimit.Option{ratelimit.WithStore(failing{}), ratelimit.WithClock(newFakeClock())}, ratelimit.ErrInvalidOption},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ratelimit.New(tt.rule, tt.opts...); !errors.Is(err, tt.want) {
				t.Fatalf("New = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestLimiterAllowPeekReset(t *testing.T) {
	clk := newFakeClock()
	lim := newLimiter(t, ratelimit.PerSecond(2).WithBurst(2), ratelimit.WithClock(clk))
	ctx := t.Context()
	for i := range 2 {
		if d, err := lim.Allow(ctx, "u"); err != nil || !d.Allowed || d.Rule != "api" {
			t.Fatalf("call %d: %v %v", i, d, err)
		}
	}
	d, err := lim.Allow(ctx, "u")
	if err != nil || d.Allowed || d.RetryAfter != 500*time.Millisecond {
		t.Fatalf("3rd: %v %v; want denied, retry after 500ms", d, err)
	}
	if d, _ := lim.Peek(ctx, "u"); d.Allowed || d.Remaining != 0 {
		t.Fatalf("peek: %v", d)
	}
	if d, _ := lim.AllowN(ctx, "u", 3); d.Allowed || d.RetryAfter != ratelimit.Never {
		t.Fatalf("cost over burst: %v; want RetryAfter Never", d)
	}
	if err := lim.Reset(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	if d, _ := lim.Peek(ctx, "u"); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("peek after reset: %v", d)
	}
	if _, err := lim.Allow(ctx, ""); !errors.Is(err, ratelimit.ErrInvalidKey) {
		t.Fatalf("empty key: %v", err)
	}
	if err := lim.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := lim.Allow(ctx, "u"); !errors.Is(err, ratelimit.ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

func TestLimiterReserveCancel(t *testing.T) {
	clk := newFakeClock()
	lim := newLimiter(t, ratelimit.PerSecond(10).WithBurst(1), ratelimit.WithClock(clk))
	ctx := t.Context()
	r1, err := lim.Reserve(ctx, "k", time.Second)
	if err != nil || !r1.OK || r1.Delay != 0 {
		t.Fatalf("first reservation: %+v %v", r1, err)
	}
	r2, err := lim.Reserve(ctx, "k", time.Second)
	if err != nil || !r2.OK || r2.Delay != 100*time.Millisecond {
		t.Fatalf("second reservation: %+v %v; want delay 100ms", r2, err)
	}
	r3, err := lim.Reserve(ctx, "k", 150*time.Millisecond)
	if err != nil || r3.OK || r3.Decision.RetryAfter != 200*time.Millisecond {
		t.Fatalf("third reservation: %+v %v; want refused, needs 200ms", r3, err)
	}
	if err := r2.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r2.Cancel(ctx); err != nil {
		t.Fatalf("second cancel: %v", err)
	}
	r4, err := lim.Reserve(ctx, "k", time.Second)
	if err != nil || !r4.OK || r4.Delay != 100*time.Millisecond {
		t.Fatalf("after cancel: %+v %v; want the cancelled slot back (delay 100ms)", r4, err)
	}
}

func TestLimiterWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := newLimiter(t, ratelimit.PerSecond(10).WithBurst(1), ratelimit.WithClock(ratelimit.SystemClock{}))
		ctx := context.Background()
		start := time.Now()
		for range 3 {
			if err := lim.Wait(ctx, "k"); err != nil {
				t.Fatal(err)
			}
		}
		if got := time.Since(start); got != 200*time.Millisecond {
			t.Fatalf("3 waits took %v, want 200ms", got)
		}
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		before := time.Now()
		if err := lim.Wait(short, "k"); !errors.Is(err, ratelimit.ErrWaitTooLong) {
			t.Fatalf("Wait past deadline = %v, want ErrWaitTooLong", err)
		}
		if time.Since(before) != 0 {
			t.Fatal("Wait past deadline blocked instead of refusing up front")
		}
		if err := lim.WaitN(ctx, "k", 2); !errors.Is(err, ratelimit.ErrWaitTooLong) {
			t.Fatalf("WaitN over burst = %v, want ErrWaitTooLong", err)
		}
	})
}

func TestLimiterWaitCancelledRefunds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := newLimiter(t, ratelimit.PerSecond(1).WithBurst(1), ratelimit.WithClock(ratelimit.SystemClock{}))
		if _, err := lim.Allow(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(100 * time.Millisecond)
			cancel()
		}()
		if err := lim.Wait(ctx, "k"); !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait = %v, want context.Canceled", err)
		}
		// The cancelled wait gave its slot back: the next one waits 900ms, not 1.9s.
		r, err := lim.Reserve(context.Background(), "k", 10*time.Second)
		if err != nil || r.Delay != 900*time.Millisecond {
			t.Fatalf("reservation after cancel: %+v %v; want delay 900ms", r, err)
		}
	})
}

// failing is a store that is always down.
type failing struct{ err error }

func (f failing) Apply(context.Context, ratelimit.Check) (ratelimit.Outcome, error) {
	return ratelimit.Outcome{}, f.err
}
func (f failing) ApplyAll(context.Context, []ratelimit.Check, []ratelimit.Outcome) (bool, error) {
	return false, f.err
}
func (f failing) Reset(context.Context, string, string) error { return f.err }
func (f failing) Close() error                                { return nil }

func TestLimiterFailurePolicy(t *testing.T) {
	down := failing{fmt.Errorf("dial: %w", ratelimit.ErrUnavailable)}
	var seen atomic.Int64
	obs := ratelimit.ObserverFunc(func(_ context.Context, _ string, d ratelimit.Decision, err error) {
		if d.ByPolicy && err != nil {
			seen.Add(1)
		}
	})
	for _, tt := range []struct {
		policy  ratelimit.FailurePolicy
		allowed bool
	}{{ratelimit.FailOpen, true}, {ratelimit.FailClosed, false}} {
		lim, err := ratelimit.New(ratelimit.Rule{Name: "r", Algorithm: tat{}, Limit: ratelimit.PerSecond(1), OnFailure: tt.policy}, ratelimit.WithStore(down), ratelimit.WithObserver(obs))
		if err != nil {
			t.Fatal(err)
		}
		d, err := lim.Allow(t.Context(), "k")
		if d.Allowed != tt.allowed || !d.ByPolicy {
			t.Fatalf("policy %d: %v; want allowed=%v by policy", tt.policy, d, tt.allowed)
		}
		if tt.allowed && err != nil {
			t.Fatalf("fail open returned %v", err)
		}
		if !tt.allowed && !errors.Is(err, ratelimit.ErrUnavailable) {
			t.Fatalf("fail closed returned %v, want ErrUnavailable", err)
		}
	}
	if seen.Load() != 2 {
		t.Fatalf("observer saw %d policy decisions, want 2", seen.Load())
	}
}

func TestCompositeStrictestWinsNothingConsumed(t *testing.T) {
	clk := newFakeClock()
	rules := []ratelimit.Rule{
		{Name: "ip", Algorithm: tat{}, Limit: ratelimit.Every(time.Hour, 5)},
		{Name: "user", Algorithm: tat{}, Limit: ratelimit.Every(time.Hour, 3)},
		{Name: "global", Algorithm: tat{}, Limit: ratelimit.Every(time.Hour, 100)},
	}
	c, err := ratelimit.NewComposite(rules, ratelimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	for i := range 3 {
		d, err := c.Allow(ctx, "1.2.3.4", "alice", "all")
		if err != nil || !d.Allowed || d.Rule != "user" {
			t.Fatalf("call %d: %v %v; want allowed, strictest rule user", i, d, err)
		}
	}
	d, err := c.Allow(ctx, "1.2.3.4", "alice", "all")
	if err != nil || d.Allowed || d.Rule != "user" {
		t.Fatalf("4th: %v %v; want denied by user", d, err)
	}
	ds, err := c.Decide(ctx, 0, "1.2.3.4", "bob", "all")
	if err != nil || ds[0].Remaining != 2 || ds[2].Remaining != 97 {
		t.Fatalf("peek: %v %v; want ip 2 and global 97 left (denied call consumed nothing)", ds, err)
	}
	if _, err := ratelimit.NewComposite([]ratelimit.Rule{rules[0], rules[0]}); !errors.Is(err, ratelimit.ErrInvalidRule) {
		t.Fatalf("duplicate names: %v", err)
	}
	if _, err := c.Allow(ctx, "only-one"); !errors.Is(err, ratelimit.ErrInvalidKey) {
		t.Fatalf("wrong key count: %v", err)
	}
}

func TestLimiterZeroAllocs(t *testing.T) {
	lim := newLimiter(t, ratelimit.Every(time.Nanosecond, 1<<40))
	ctx := context.Background()
	if _, err := lim.Allow(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(1000, func() { _, _ = lim.Allow(ctx, "k") }); n != 0 {
		t.Fatalf("Limiter.Allow: %v allocs/op, want 0", n)
	}
}
