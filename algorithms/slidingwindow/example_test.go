package slidingwindow_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/algorithms/slidingwindow"
	"github.com/sluicehq/sluice/core/ratelimit"
)

func Example() {
	alg := slidingwindow.New()
	limit := ratelimit.PerSecond(4)
	start := int64(1_700_000_000_000_000_000) // a window boundary
	// Four units at the end of one window...
	_, state, _ := alg.Decide(nil, start+int64(900*time.Millisecond), limit, 4, nil)
	// ...still weigh on the next one: 1.25 s in, 75% of them count.
	o, _, err := alg.Decide(state, start+int64(1250*time.Millisecond), limit, 2, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("allowed=%v remaining=%d retry=%s\n", o.Allowed, o.Remaining, o.RetryAfter)
	// Output:
	// allowed=false remaining=1 retry=250ms
}
