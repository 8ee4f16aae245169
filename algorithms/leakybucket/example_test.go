package leakybucket_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/algorithms/leakybucket"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// Example shows the bucket as a queue: each reservation waits for the
// water ahead of it to drain, so requests are spaced at the drain rate.
func Example() {
	alg := leakybucket.New()
	limit := ratelimit.Limit{Count: 4, Period: time.Second, Burst: 4}
	var state []byte
	now := int64(1_700_000_000_000_000_000)
	for i := range 4 {
		o, next, err := alg.Reserve(state, now, limit, 1, time.Second, nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		state = next
		fmt.Printf("request %d: allowed=%v delay=%s\n", i, o.Allowed, o.Delay)
	}
	// A meter call sees the four queued units filling the bucket.
	o, _, _ := alg.Decide(state, now, limit, 1, nil)
	fmt.Printf("meter: allowed=%v retry=%s\n", o.Allowed, o.RetryAfter)
	// Output:
	// request 0: allowed=true delay=0s
	// request 1: allowed=true delay=250ms
	// request 2: allowed=true delay=500ms
	// request 3: allowed=true delay=750ms
	// meter: allowed=false retry=250ms
}
