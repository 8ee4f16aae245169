package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// This example uses a test clock so its output is deterministic; real
// programs leave the clock out. The algorithm here is a minimal GCRA from
// this package's tests; programs use github.com/sluicehq/sluice/algorithms.
func ExampleLimiter_Allow() {
	clk := newFakeClock()
	lim, err := ratelimit.New(ratelimit.Rule{
		Name:      "api",
		Algorithm: tat{},
		Limit:     ratelimit.PerSecond(2).WithBurst(3),
	}, ratelimit.WithClock(clk))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lim.Close()

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

func ExampleComposite_Allow() {
	clk := newFakeClock()
	c, err := ratelimit.NewComposite([]ratelimit.Rule{
		{Name: "per-user", Algorithm: tat{}, Limit: ratelimit.PerMinute(2)},
		{Name: "global", Algorithm: tat{}, Limit: ratelimit.PerMinute(100)},
	}, ratelimit.WithClock(clk))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	for range 3 {
		d, _ := c.Allow(context.Background(), "bob", "all")
		fmt.Println(d.Allowed, d.Rule, d.Remaining)
	}
	// Output:
	// true per-user 1
	// true per-user 0
	// false per-user 0
}
