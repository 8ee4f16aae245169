// Package fixedwindow implements the fixed window counter as a
// ratelimit.Algorithm.
//
//	rule := sluice.Rule{Name: "api", Algorithm: fixedwindow.New(), Limit: sluice.PerMinute(100)}
//
// # Semantics
//
// A Limit is one window of W = Burst·Period/Count nanoseconds admitting
// Burst units: PerMinute(100) admits 100 per minute, and
// PerMinute(100).WithBurst(200) admits 200 per window of two minutes, so
// the long-run rate is Count per Period and Burst is the most admitted at
// once. Windows are aligned to multiples of W since the Unix epoch. A call
// of cost n is admitted when used + n <= Burst, used being the count of
// the current window. Across a window boundary up to 2·Burst may pass in a
// short time; package slidinglog avoids that.
//
//   - Remaining is Burst − used after the call, at least 0.
//   - RetryAfter is the time until the start of the first window in which n
//     fits: exact, never early; Never when n > Burst.
//   - ResetAfter is the time until a window with nothing counted; TTL
//     equals it, and nothing counted is the empty state (TTL 0).
//   - Cost 0 peeks; a denial, a peek and a cost above Burst change nothing.
//   - An instant before the recorded window is treated as its start, so a
//     clock going backwards never reopens a window.
//
// Charge counts units consumed elsewhere unconditionally; a count over
// Burst carries into the following windows at Burst per window (up to
// MaxUsed), so the long-run rate still holds.
//
// # Capabilities and errors
//
// Algorithm implements ratelimit.Charger and ratelimit.LimitValidator: it
// refuses, wrapping ratelimit.ErrInvalidLimit, a limit whose window
// Burst·Period/Count is not a whole number of nanoseconds (1 per 3/7 s,
// say), rather than round it. It implements neither Reserver nor Refunder.
// A state it cannot decode gives ratelimit.ErrCorruptState.
//
// The arithmetic and the state encoding are in docs/algorithms.md of the
// repository.
package fixedwindow
