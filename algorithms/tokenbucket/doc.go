// Package tokenbucket implements the token bucket as a
// ratelimit.Algorithm, in exact integer nanosecond arithmetic.
//
//	rule := sluice.Rule{Name: "api", Algorithm: tokenbucket.New(), Limit: sluice.PerSecond(10).WithBurst(20)}
//
// # Semantics
//
// A bucket holds at most Burst tokens and starts full; it refills
// continuously at Count tokens per Period, fractions included, so the
// long-run rate is exactly Count per Period and Burst is the most admitted
// at once. A call of cost n is admitted when the bucket holds n whole
// tokens, and takes them.
//
//   - Remaining is the whole tokens left (0 in debt).
//   - RetryAfter is the smallest whole number of nanoseconds after which n
//     tokens are there: never early, at most 1 ns late; Never when n > Burst.
//   - ResetAfter is the time until the bucket is full; TTL equals it, and a
//     full bucket is the empty state (TTL 0).
//   - Cost 0 peeks; a denial, a peek and a cost above Burst change nothing.
//   - An instant earlier than the recorded one is treated as the recorded
//     one, so a clock going backwards never mints tokens.
//
// Reserve and Charge may take tokens the bucket does not hold (debt, at
// most arith.MaxDebt); Refund never fills above Burst. Admission is
// identical to package gcra's; the two differ only in their state (25
// bytes here).
//
// # Capabilities and errors
//
// Algorithm implements ratelimit.Reserver (take now, wait at most
// maxWait), ratelimit.Refunder and ratelimit.Charger. A state it cannot
// decode gives ratelimit.ErrCorruptState.
//
// The arithmetic, its rounding and the state encoding are derived in
// docs/algorithms.md of the repository.
package tokenbucket
