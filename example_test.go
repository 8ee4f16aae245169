package sluice_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/internal/fakeclock"
)

// This example gives the limiter a memory store with a test clock so its
// output is deterministic; real programs leave the store out.
func ExampleLimiter_Allow() {
	clk := fakeclock.New()
	st, _ := memstore.New(memstore.WithClock(clk))
	lim, err := sluice.New(sluice.Rule{
		Name:      "api",
		Algorithm: gcra.New(),
		Limit:     sluice.PerSecond(2).WithBurst(3),
	}, sluice.WithStore(st))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	for range 4 {
		d, _ := lim.Allow(ctx, "alice")
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	}
	clk.Advance(500 * time.Millisecond)
	d, _ := lim.Allow(ctx, "alice")
	fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	// Output:
	// true 2 0s
	// true 1 0s
	// true 0 0s
	// false 0 500ms
	// true 0 0s
}

func ExampleComposite_AllowN() {
	st, _ := memstore.New(memstore.WithClock(fakeclock.New()))
	c, err := sluice.NewComposite([]sluice.Rule{
		{Name: "per-user", Algorithm: gcra.New(), Limit: sluice.PerMinute(2)},
		{Name: "global", Algorithm: gcra.New(), Limit: sluice.PerMinute(100)},
	}, sluice.WithStore(st))
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 3 {
		d, _ := c.AllowN(context.Background(), 1, "bob", "all")
		fmt.Println(d.Allowed, d.Rule, d.Remaining)
	}
	// Output:
	// true per-user 1
	// true per-user 0
	// false per-user 0
}

func ExampleLimiter_SetRule() {
	st, _ := memstore.New(memstore.WithClock(fakeclock.New()))
	lim, _ := sluice.New(sluice.Rule{Name: "api", Algorithm: gcra.New(), Limit: sluice.PerMinute(2)}, sluice.WithStore(st))
	ctx := context.Background()
	d, _ := lim.AllowN(ctx, "alice", 2)
	fmt.Println(d.Allowed, d.Remaining)
	// Raise the limit while it runs: alice's bucket carries on, empty.
	_ = lim.SetRule(sluice.Rule{Name: "api", Algorithm: gcra.New(), Limit: sluice.PerMinute(10)})
	d, _ = lim.Allow(ctx, "alice")
	fmt.Println(d.Allowed, d.Limit, d.RetryAfter)
	// Output:
	// true 0
	// false 10/1m0s burst 10 6s
}
