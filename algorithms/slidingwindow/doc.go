// Package slidingwindow implements the sliding window counter as a
// ratelimit.Algorithm: a weighted estimate of the units admitted in the
// last window from the counts of two fixed windows, in 25 bytes of state.
//
//	rule := sluice.Rule{Name: "api", Algorithm: slidingwindow.New(), Limit: sluice.PerMinute(100)}
//
// # Semantics
//
// A Limit is a sliding window of W = Burst·Period/Count nanoseconds
// admitting Burst units (PerMinute(100).WithBurst(200): 200 per sliding two
// minutes). Fixed windows of W are aligned to the Unix epoch; at el into
// the current window, with cur counted in it and prev in the previous one,
//
//	estimate = cur + ceil(prev·(W−el)/W)
//
// and a call of cost n is admitted when estimate + n <= Burst. The estimate
// rounds up, so no sliding window admits more than Burst and the long-run
// rate is at most Count per Period; it may be less (about Burst−1 per
// window for a client sending as fast as it is admitted, half the rate for
// Burst 1).
//
//   - Remaining is Burst − estimate after the call, at least 0.
//   - RetryAfter is exact (the first instant the cost passes if nothing
//     else is counted); Never when n > Burst.
//   - ResetAfter is the time until both windows count nothing; TTL equals
//     it, and nothing counted is the empty state (TTL 0).
//   - Cost 0 peeks; a denial, a peek and a cost above Burst change nothing.
//   - An instant before the recorded window is treated as its start, so a
//     clock going backwards never discounts anything.
//
// Charge counts units consumed elsewhere unconditionally (each count stops
// at MaxCounted); RetryAfter then waits for the weight to decay.
//
// # Capabilities and errors
//
// Algorithm implements ratelimit.Charger and ratelimit.LimitValidator: it
// refuses, wrapping ratelimit.ErrInvalidLimit, a limit whose window is not
// a whole number of nanoseconds. A state it cannot decode gives
// ratelimit.ErrCorruptState.
//
// The arithmetic and the state encoding are in docs/algorithms.md of the
// repository.
package slidingwindow
