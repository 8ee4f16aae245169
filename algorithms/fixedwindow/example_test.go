package fixedwindow_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/algorithms/fixedwindow"
	"github.com/sluicehq/sluice/core/ratelimit"
)

func Example() {
	alg := fixedwindow.New()
	limit := ratelimit.PerSecond(2) // 2 per window of one second
	var state []byte
	start := int64(1_700_000_000_000_000_000) // a window boundary
	for _, at := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 900 * time.Millisecond, time.Second} {
		o, next, err := alg.Decide(state, start+int64(at), limit, 1, nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		state = next
		fmt.Printf("at %s: allowed=%v remaining=%d retry=%s\n", at, o.Allowed, o.Remaining, o.RetryAfter)
	}
	// Output:
	// at 100ms: allowed=true remaining=1 retry=0s
	// at 200ms: allowed=true remaining=0 retry=0s
	// at 900ms: allowed=false remaining=0 retry=100ms
	// at 1s: allowed=true remaining=1 retry=0s
}
