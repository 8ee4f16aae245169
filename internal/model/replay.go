package model

import (
	"slices"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// ExactAdmits runs request instants (offsets from a common start, which
// it sorts) through one exact token bucket of l, full at 0, and returns
// how many it admits: the count a perfectly coordinated limiter would
// reach, against which drift tests measure distributed ones.
func ExactAdmits(l ratelimit.Limit, at []time.Duration) int64 {
	slices.Sort(at)
	burst, rate := float64(l.Burst), float64(l.Count)/l.Period.Seconds()
	tokens, last, n := burst, time.Duration(0), int64(0)
	for _, t := range at {
		tokens = min(burst, tokens+rate*(t-last).Seconds())
		last = t
		if tokens >= 1 {
			tokens--
			n++
		}
	}
	return n
}
