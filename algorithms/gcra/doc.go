// Package gcra implements the generic cell rate algorithm (GCRA) as a
// ratelimit.Algorithm, in exact integer nanosecond arithmetic, with one
// instant of state.
//
//	rule := sluice.Rule{Name: "api", Algorithm: gcra.New(), Limit: sluice.PerSecond(10).WithBurst(20)}
//
// # Semantics
//
// Admission is exactly the token bucket's (package tokenbucket): the
// long-run rate is exactly Count per Period (the emission interval
// Period/Count is never rounded) and Burst is the most admitted at once;
// the bucket starts full. The state is the virtual instant at which the
// bucket was empty (17 bytes).
//
//   - Remaining is the whole units available after the call (0 in debt).
//   - RetryAfter is never early and at most 1 ns late; Never when the cost
//     is above Burst.
//   - ResetAfter is the time until the bucket is full; TTL equals it, and a
//     full bucket is the empty state (TTL 0).
//   - Cost 0 peeks; a denial, a peek and a cost above Burst change nothing.
//   - No instant is clamped: an instant earlier than a previous call sees
//     less refill, so a clock going backwards never mints capacity (it
//     yields less than the token bucket would).
//
// Reserve and Charge may take units that are not available (debt, at most
// arith.MaxDebt); Refund never fills above Burst.
//
// # Capabilities and errors
//
// Algorithm implements ratelimit.Reserver (take now, wait at most
// maxWait), ratelimit.Refunder and ratelimit.Charger. A state it cannot
// decode gives ratelimit.ErrCorruptState.
//
// The arithmetic, its rounding and the state encoding are derived in
// docs/algorithms.md of the repository.
package gcra
