package slidinglog_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/algorithms/slidinglog"
	"github.com/sluicehq/sluice/core/ratelimit"
)

func Example() {
	alg := slidinglog.New()
	limit := ratelimit.PerSecond(3)
	var state []byte
	start := int64(1_700_000_000_000_000_000)
	for _, c := range []struct {
		at   time.Duration
		cost int64
	}{{0, 2}, {400 * time.Millisecond, 1}, {700 * time.Millisecond, 2}, {time.Second, 2}} {
		o, next, err := alg.Decide(state, start+int64(c.at), limit, c.cost, nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		state = next
		fmt.Printf("at %s cost %d: allowed=%v remaining=%d retry=%s\n", c.at, c.cost, o.Allowed, o.Remaining, o.RetryAfter)
	}
	fmt.Printf("state: %d bytes\n", len(state))
	// Output:
	// at 0s cost 2: allowed=true remaining=1 retry=0s
	// at 400ms cost 1: allowed=true remaining=0 retry=0s
	// at 700ms cost 2: allowed=false remaining=0 retry=300ms
	// at 1s cost 2: allowed=true remaining=0 retry=0s
	// state: 17 bytes
}
