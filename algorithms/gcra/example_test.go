package gcra_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/core/ratelimit"
)

func Example() {
	alg := gcra.New()
	limit := ratelimit.Limit{Count: 2, Period: time.Second, Burst: 3}
	var state []byte
	now := int64(1_700_000_000_000_000_000)
	for i := range 4 {
		o, next, err := alg.Decide(state, now, limit, 1, nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		state = next
		fmt.Printf("call %d: allowed=%v remaining=%d retry=%s reset=%s\n", i, o.Allowed, o.Remaining, o.RetryAfter, o.ResetAfter)
	}
	// Output:
	// call 0: allowed=true remaining=2 retry=0s reset=500ms
	// call 1: allowed=true remaining=1 retry=0s reset=1s
	// call 2: allowed=true remaining=0 retry=0s reset=1.5s
	// call 3: allowed=false remaining=0 retry=500ms reset=1.5s
}
