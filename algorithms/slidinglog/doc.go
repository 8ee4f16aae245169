// Package slidinglog implements the sliding log as a ratelimit.Algorithm:
// an exact count of the units admitted in the last window, at the price of
// a state that grows with the traffic.
//
//	rule := sluice.Rule{Name: "login", Algorithm: slidinglog.New(), Limit: sluice.PerMinute(5)}
//
// # Semantics
//
// A Limit is a sliding window of W = Burst·Period/Count nanoseconds
// admitting Burst units: PerMinute(5) admits 5 in any minute, and
// PerMinute(100).WithBurst(200) 200 in any two minutes, so the long-run
// rate is Count per Period and Burst is the most admitted at once. The log
// records each admitted call's instant and cost; units logged at ts count
// while now − ts < W, and a call of cost n is admitted when the counting
// units plus n are at most Burst. There is no rounding.
//
//   - Remaining is Burst minus the units counting after the call.
//   - RetryAfter is exact: the expiry of the entry that frees enough
//     units; Never when n > Burst.
//   - ResetAfter is the time until the newest entry expires; TTL equals
//     it, and a log counting nothing is the empty state (TTL 0).
//   - Cost 0 peeks; a denial, a peek and a cost above Burst change nothing.
//   - An instant earlier than the newest entry is treated as that entry's,
//     so a clock going backwards never expires anything early.
//
// The state is O(Burst): one entry of at most 20 bytes per distinct
// instant of an admitted call in the last window, and Decide costs
// O(entries). Prefer package slidingwindow for large quotas; use the log
// when exactness matters and Burst is small. Decide appends the new state
// to dst[:0], which must not overlap the input state.
//
// # Capabilities and errors
//
// Algorithm implements ratelimit.LimitValidator: it refuses, wrapping
// ratelimit.ErrInvalidLimit, a limit whose window is not a whole number of
// nanoseconds. It has no Reserve, Refund or Charge. A state it cannot
// decode gives ratelimit.ErrCorruptState.
//
// The state encoding is in docs/algorithms.md of the repository.
package slidinglog
