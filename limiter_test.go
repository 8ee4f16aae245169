package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms/fixedwindow"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/fakeclock"
)

func TestNewValidates(t *testing.T) {
	ok := sluice.Rule{Name: "r", Algorithm: gcra.New(), Limit: sluice.PerSecond(1)}
	tests := []struct {
		name string
		rule sluice.Rule
		opts []sluice.Option
		want error
	}{
		{"no name", sluice.Rule{Algorithm: gcra.New(), Limit: sluice.PerSecond(1)}, nil, ratelimit.ErrInvalidRule},
		{"no algorithm", sluice.Rule{Name: "r", Limit: sluice.PerSecond(1)}, nil, ratelimit.ErrInvalidRule},
		{"bad limit", sluice.Rule{Name: "r", Algorithm: gcra.New()}, nil, ratelimit.ErrInvalidLimit},
		{"negative budget", sluice.Rule{Name: "r", Algorithm: gcra.New(), Limit: sluice.PerSecond(1), Budget: -1}, nil, ratelimit.ErrInvalidRule},
		{"nil store", ok, []sluice.Option{sluice.WithStore(nil)}, ratelimit.ErrInvalidOption},
		{"nil observer", ok, []sluice.Option{sluice.WithObserver(nil)}, ratelimit.ErrInvalidOption},
		{"nil option", ok, []sluice.Option{nil}, ratelimit.ErrInvalidOption},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := sluice.New(tt.rule, tt.opts...)
			if !errors.Is(err, tt.want) || !errors.Is(err, sluice.ErrInvalid) {
				t.Fatalf("New = %v, want %v (and ErrInvalid)", err, tt.want)
			}
		})
	}
}

func TestLimiterAllowPeekReset(t *testing.T) {
	clk := fakeclock.New()
	lim := newLimiter(t, sluice.PerSecond(2).WithBurst(2), sluice.WithStore(clockedStore(t, clk)))
	ctx := t.Context()
	for i := range 2 {
		if d, err := lim.Allow(ctx, "u"); err != nil || !d.Allowed || d.Rule != "api" {
			t.Fatalf("call %d: %+v %v", i, d, err)
		}
	}
	d, err := lim.Allow(ctx, "u")
	if err != nil || d.Allowed || d.RetryAfter != 500*time.Millisecond {
		t.Fatalf("3rd: %+v %v; want denied, retry after 500ms", d, err)
	}
	if d, _ := lim.AllowN(ctx, "u", 0); d.Allowed || d.Remaining != 0 {
		t.Fatalf("peek: %+v", d)
	}
	if d, _ := lim.AllowN(ctx, "u", 3); d.Allowed || d.RetryAfter != sluice.Never {
		t.Fatalf("cost over burst: %+v; want RetryAfter Never", d)
	}
	if err := lim.Reset(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	if d, _ := lim.AllowN(ctx, "u", 0); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("peek after reset: %+v", d)
	}
	if _, err := lim.Allow(ctx, ""); !errors.Is(err, sluice.ErrInvalid) {
		t.Fatalf("empty key: %v, want ErrInvalid", err)
	}
	if _, err := lim.AllowN(ctx, "u", -1); !errors.Is(err, ratelimit.ErrInvalidCost) {
		t.Fatalf("negative cost: %v, want ErrInvalidCost", err)
	}
}

func TestLimitersShareTheDefaultStoreByRuleName(t *testing.T) {
	name := fmt.Sprintf("shared-%d", time.Now().UnixNano())
	rule := sluice.Rule{Name: name, Algorithm: gcra.New(), Limit: sluice.PerHour(3)}
	a, err := sluice.New(rule)
	if err != nil {
		t.Fatal(err)
	}
	c, err := sluice.NewComposite([]sluice.Rule{rule})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if d, _ := a.AllowN(ctx, "k", 2); !d.Allowed {
		t.Fatalf("limiter: %+v", d)
	}
	if d, _ := c.AllowN(ctx, 1, "k"); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("composite over the same rule: %+v, want the last unit", d)
	}
	if d, _ := a.Allow(ctx, "k"); d.Allowed {
		t.Fatalf("limiter after the composite took the last unit: %+v, want denied", d)
	}
}

func TestLimiterReserveCancel(t *testing.T) {
	clk := fakeclock.New()
	lim := newLimiter(t, sluice.PerSecond(10).WithBurst(1), sluice.WithStore(clockedStore(t, clk)))
	ctx := t.Context()
	r1, err := lim.ReserveN(ctx, "k", 1, time.Second)
	if err != nil || !r1.OK() || r1.Delay() != 0 {
		t.Fatalf("first reservation: %v %v %v", r1.OK(), r1.Delay(), err)
	}
	r2, err := lim.ReserveN(ctx, "k", 1, time.Second)
	if err != nil || !r2.OK() || r2.Delay() != 100*time.Millisecond {
		t.Fatalf("second reservation: %v %v %v; want delay 100ms", r2.OK(), r2.Delay(), err)
	}
	r3, err := lim.ReserveN(ctx, "k", 1, 150*time.Millisecond)
	if err != nil || r3.OK() || r3.Delay() != 200*time.Millisecond {
		t.Fatalf("third reservation: %v %v %v; want refused, needs 200ms", r3.OK(), r3.Delay(), err)
	}
	if err := r2.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r2.Cancel(ctx); err != nil {
		t.Fatalf("second cancel: %v", err)
	}
	r4, err := lim.ReserveN(ctx, "k", 1, time.Second)
	if err != nil || !r4.OK() || r4.Delay() != 100*time.Millisecond {
		t.Fatalf("after cancel: %v %v %v; want the cancelled slot back (delay 100ms)", r4.OK(), r4.Delay(), err)
	}
	fw, err := sluice.New(sluice.Rule{Name: "fw", Algorithm: fixedwindow.New(), Limit: sluice.PerSecond(1)}, sluice.WithStore(clockedStore(t, clk)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fw.ReserveN(ctx, "k", 1, time.Second); !errors.Is(err, ratelimit.ErrUnsupported) {
		t.Fatalf("ReserveN on a fixed window: %v, want ErrUnsupported", err)
	}
}

func TestLimiterWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := newLimiter(t, sluice.PerSecond(10).WithBurst(1), sluice.WithStore(clockedStore(t, ratelimit.SystemClock{})))
		ctx := context.Background()
		start := time.Now()
		for range 3 {
			if err := lim.WaitN(ctx, "k", 1); err != nil {
				t.Fatal(err)
			}
		}
		if got := time.Since(start); got != 200*time.Millisecond {
			t.Fatalf("3 waits took %v, want 200ms", got)
		}
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		before := time.Now()
		if err := lim.WaitN(short, "k", 1); !errors.Is(err, sluice.ErrWaitTooLong) {
			t.Fatalf("Wait past deadline = %v, want ErrWaitTooLong", err)
		}
		if time.Since(before) != 0 {
			t.Fatal("Wait past deadline blocked instead of refusing up front")
		}
		if err := lim.WaitN(ctx, "k", 2); !errors.Is(err, sluice.ErrWaitTooLong) {
			t.Fatalf("WaitN over burst = %v, want ErrWaitTooLong", err)
		}
	})
}

func TestLimiterWaitCancelledRefunds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := newLimiter(t, sluice.PerSecond(1).WithBurst(1), sluice.WithStore(clockedStore(t, ratelimit.SystemClock{})))
		if _, err := lim.Allow(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(100 * time.Millisecond)
			cancel()
		}()
		if err := lim.WaitN(ctx, "k", 1); !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait = %v, want context.Canceled", err)
		}
		// The cancelled wait gave its slot back: the next one waits 900ms, not 1.9s.
		r, err := lim.ReserveN(context.Background(), "k", 1, 10*time.Second)
		if err != nil || r.Delay() != 900*time.Millisecond {
			t.Fatalf("reservation after cancel: %v %v; want delay 900ms", r.Delay(), err)
		}
	})
}

func TestLimiterFailurePolicy(t *testing.T) {
	down := failing{fmt.Errorf("dial: %w", ratelimit.ErrUnavailable)}
	var seen atomic.Int64
	obs := sluice.WithObserver(func(_ context.Context, _ string, d sluice.Decision, err error) {
		if d.ByPolicy && err != nil {
			seen.Add(1)
		}
	})
	for _, open := range []bool{true, false} {
		lim, err := sluice.New(sluice.Rule{Name: "r", Algorithm: gcra.New(), Limit: sluice.PerSecond(1), FailOpen: open}, sluice.WithStore(down), obs)
		if err != nil {
			t.Fatal(err)
		}
		d, err := lim.Allow(t.Context(), "k")
		if d.Allowed != open || !d.ByPolicy {
			t.Fatalf("FailOpen %v: %+v; want allowed=%v by policy", open, d, open)
		}
		if open && err != nil {
			t.Fatalf("fail open returned %v", err)
		}
		if !open && !errors.Is(err, sluice.ErrUnavailable) {
			t.Fatalf("fail closed returned %v, want ErrUnavailable", err)
		}
		if err := lim.WaitN(t.Context(), "k", 1); open != (err == nil) {
			t.Fatalf("WaitN with FailOpen %v: %v", open, err)
		}
	}
	if seen.Load() != 4 {
		t.Fatalf("observer saw %d policy decisions, want 4", seen.Load())
	}
}

// The budget bounds a call to a store that does not answer, whatever the
// caller's context says; only the caller's own cancellation gets its error.
func TestLimiterBudgetHoldsUnderDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const budget = 20 * time.Millisecond
		for _, open := range []bool{true, false} {
			rule := sluice.Rule{Name: "r", Algorithm: gcra.New(), Limit: sluice.PerSecond(1), FailOpen: open, Budget: budget}
			lim, err := sluice.New(rule, sluice.WithStore(stalled{}))
			if err != nil {
				t.Fatal(err)
			}
			comp, err := sluice.NewComposite([]sluice.Rule{rule}, sluice.WithStore(stalled{}))
			if err != nil {
				t.Fatal(err)
			}
			for _, deadline := range []time.Duration{0, 10 * time.Millisecond, time.Second} {
				want := budget
				if deadline > 0 {
					want = min(budget, deadline)
				}
				for name, call := range map[string]func(ctx context.Context) (sluice.Decision, error){
					"limiter":   func(ctx context.Context) (sluice.Decision, error) { return lim.Allow(ctx, "k") },
					"composite": func(ctx context.Context) (sluice.Decision, error) { return comp.AllowN(ctx, 1, "k") },
				} {
					ctx, cancel := context.Background(), context.CancelFunc(func() {})
					if deadline > 0 {
						ctx, cancel = context.WithTimeout(ctx, deadline)
					}
					start := time.Now()
					d, err := call(ctx)
					cancel()
					if took := time.Since(start); took != want {
						t.Fatalf("%s, open %v, deadline %s: answered after %s, want %s", name, open, deadline, took, want)
					}
					if !d.ByPolicy || d.Allowed != open {
						t.Fatalf("%s, open %v, deadline %s: %+v, want a policy decision", name, open, deadline, d)
					}
					if open && err != nil || !open && !errors.Is(err, sluice.ErrUnknownOutcome) {
						t.Fatalf("%s, open %v, deadline %s: error %v", name, open, deadline, err)
					}
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				time.Sleep(time.Millisecond)
				cancel()
			}()
			if d, err := lim.Allow(ctx, "k"); !errors.Is(err, context.Canceled) || d.Allowed || d.ByPolicy {
				t.Fatalf("cancelled caller, open %v: %+v %v, want its context error", open, d, err)
			}
		}
	})
}

func TestSetRuleKeepsState(t *testing.T) {
	clk := fakeclock.New()
	lim := newLimiter(t, sluice.PerHour(10), sluice.WithStore(clockedStore(t, clk)))
	ctx := t.Context()
	if d, _ := lim.AllowN(ctx, "k", 10); !d.Allowed {
		t.Fatalf("draining: %+v", d)
	}
	if err := lim.SetRule(sluice.Rule{Name: "api", Algorithm: gcra.New(), Limit: sluice.PerHour(20)}); err != nil {
		t.Fatal(err)
	}
	if d, _ := lim.Allow(ctx, "k"); d.Allowed || d.Limit != sluice.PerHour(20) {
		t.Fatalf("after raising the limit: %+v, want still empty (no free burst) under the new limit", d)
	}
	clk.Advance(3 * time.Minute) // one unit at 20/hour
	if d, _ := lim.Allow(ctx, "k"); !d.Allowed {
		t.Fatalf("after one refill period of the new limit: %+v", d)
	}
	if err := lim.SetRule(sluice.Rule{Name: "other", Algorithm: gcra.New(), Limit: sluice.PerHour(1)}); !errors.Is(err, sluice.ErrInvalid) {
		t.Fatalf("renaming: %v, want ErrInvalid", err)
	}
	if err := lim.SetRule(sluice.Rule{Name: "api", Algorithm: gcra.New()}); !errors.Is(err, sluice.ErrInvalid) {
		t.Fatalf("bad limit: %v, want ErrInvalid", err)
	}
}

func TestSetRuleConvertsAlgorithm(t *testing.T) {
	clk := fakeclock.New()
	lim := newLimiter(t, sluice.PerHour(10), sluice.WithStore(clockedStore(t, clk)))
	ctx := t.Context()
	if d, _ := lim.AllowN(ctx, "k", 7); !d.Allowed {
		t.Fatalf("taking 7: %+v", d)
	}
	if err := lim.SetRule(sluice.Rule{Name: "api", Algorithm: tokenbucket.New(), Limit: sluice.PerHour(10)}); err != nil {
		t.Fatal(err)
	}
	d, err := lim.AllowN(ctx, "k", 0)
	if err != nil || d.Remaining != 3 {
		t.Fatalf("after switching to a token bucket: %+v %v, want 3 left (converted, not reset)", d, err)
	}
	if d, err := lim.AllowN(ctx, "k", 3); err != nil || !d.Allowed {
		t.Fatalf("taking the 3 left: %+v %v", d, err)
	}
	if d, _ := lim.Allow(ctx, "k"); d.Allowed {
		t.Fatalf("a 4th: %+v, want denied", d)
	}
}

func TestAllowWithLimitAndUnlimited(t *testing.T) {
	clk := fakeclock.New()
	lim := newLimiter(t, sluice.PerHour(2), sluice.WithStore(clockedStore(t, clk)))
	ctx := t.Context()
	pro := sluice.PerHour(5)
	for i := range 5 {
		if d, err := lim.AllowWithLimit(ctx, "k", 1, pro); err != nil || !d.Allowed || d.Limit != pro {
			t.Fatalf("pro call %d: %+v %v", i, d, err)
		}
	}
	if d, _ := lim.Allow(ctx, "k"); d.Allowed {
		t.Fatalf("free limit after pro drained the key: %+v, want denied (one bucket)", d)
	}
	if _, err := lim.AllowWithLimit(ctx, "k", 1, sluice.Limit{}); !errors.Is(err, sluice.ErrInvalid) {
		t.Fatalf("zero limit: %v, want ErrInvalid", err)
	}
	for range 3 {
		d, err := lim.AllowWithLimit(ctx, "k", 1000, sluice.Unlimited())
		if err != nil || !d.Allowed || d.Remaining != math.MaxInt64 {
			t.Fatalf("unlimited: %+v %v", d, err)
		}
	}
	open, err := sluice.New(sluice.Rule{Name: "open", Algorithm: gcra.New(), Limit: sluice.Unlimited()}, sluice.WithStore(failing{ratelimit.ErrUnavailable}))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := open.Allow(ctx, "k"); err != nil || !d.Allowed || d.ByPolicy {
		t.Fatalf("unlimited rule on a down store: %+v %v, want allowed without the store", d, err)
	}
}

func TestSetRuleIsAtomicConcurrentSafe(t *testing.T) {
	lim := newLimiter(t, sluice.PerHour(1000), sluice.WithStore(clockedStore(t, fakeclock.New())))
	ctx := t.Context()
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for range 8 {
		wg.Go(func() {
			for range 500 {
				d, err := lim.Allow(ctx, "k")
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
				if l := d.Limit; l != sluice.PerHour(1000) && l != sluice.PerHour(1500) {
					t.Errorf("decision under a limit never set: %v", l)
				}
			}
		})
	}
	if err := lim.SetRule(sluice.Rule{Name: "api", Algorithm: gcra.New(), Limit: sluice.PerHour(1500)}); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	// The clock stands still. GCRA carries how far the bucket has refilled,
	// a fraction of its hour-long window under both limits, so the units
	// left when the change lands scale by 1.5: 1000 if it lands after the
	// old limit ran out, up to 1500 if it lands first, never more.
	if n := admitted.Load(); n < 1000 || n > 1500 {
		t.Fatalf("admitted %d, want 1000..1500", n)
	}
}

func TestCompositeStrictestWinsNothingConsumed(t *testing.T) {
	clk := fakeclock.New()
	rules := []sluice.Rule{
		{Name: "ip", Algorithm: gcra.New(), Limit: sluice.PerHour(5)},
		{Name: "user", Algorithm: gcra.New(), Limit: sluice.PerHour(3)},
		{Name: "global", Algorithm: gcra.New(), Limit: sluice.PerHour(100)},
		{Name: "admin", Algorithm: gcra.New(), Limit: sluice.Unlimited()},
	}
	c, err := sluice.NewComposite(rules, sluice.WithStore(clockedStore(t, clk)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for i := range 3 {
		d, err := c.AllowN(ctx, 1, "1.2.3.4", "alice", "all", "alice")
		if err != nil || !d.Allowed || d.Rule != "user" {
			t.Fatalf("call %d: %+v %v; want allowed, strictest rule user", i, d, err)
		}
	}
	d, err := c.AllowN(ctx, 1, "1.2.3.4", "alice", "all", "alice")
	if err != nil || d.Allowed || d.Rule != "user" {
		t.Fatalf("4th: %+v %v; want denied by user", d, err)
	}
	ds, err := c.Decide(ctx, 0, "1.2.3.4", "bob", "all", "bob")
	if err != nil || ds[0].Remaining != 2 || ds[2].Remaining != 97 || !ds[3].Allowed {
		t.Fatalf("peek: %+v %v; want ip 2 and global 97 left (denied call consumed nothing)", ds, err)
	}
	if err := c.SetRule(sluice.Rule{Name: "user", Algorithm: gcra.New(), Limit: sluice.PerHour(4)}); err != nil {
		t.Fatal(err)
	}
	if d, _ := c.AllowN(ctx, 1, "1.2.3.4", "alice", "all", "alice"); d.Allowed {
		t.Fatalf("after raising user to 4/hour: %+v, want still denied (no free burst)", d)
	}
	if err := c.SetRule(sluice.Rule{Name: "nope", Algorithm: gcra.New(), Limit: sluice.PerHour(4)}); !errors.Is(err, sluice.ErrInvalid) {
		t.Fatalf("unknown rule: %v", err)
	}
	if _, err := sluice.NewComposite([]sluice.Rule{rules[0], rules[0]}); !errors.Is(err, ratelimit.ErrInvalidRule) {
		t.Fatalf("duplicate names: %v", err)
	}
	if _, err := c.AllowN(ctx, 1, "only-one"); !errors.Is(err, ratelimit.ErrInvalidKey) {
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
	// A budget means nothing to the memory store: no deadline, no timer.
	budgeted, err := sluice.New(sluice.Rule{Name: "budgeted", Algorithm: gcra.New(), Limit: ratelimit.Every(time.Nanosecond, 1<<40), Budget: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(1000, func() { _, _ = budgeted.Allow(ctx, "k") }); n != 0 {
		t.Fatalf("Limiter.Allow with a Budget on the memory store: %v allocs/op, want 0", n)
	}
}
