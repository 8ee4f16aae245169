// Package leakybucket implements the leaky bucket as a ratelimit.Algorithm,
// as a meter and as a queue, in exact integer nanosecond arithmetic.
//
//	rule := sluice.Rule{Name: "jobs", Algorithm: leakybucket.New(), Limit: sluice.PerSecond(10).WithBurst(20)}
//
// # Semantics
//
// A bucket of capacity Burst starts empty and drains continuously at Count
// units per Period, fractions included: the long-run rate is exactly Count
// per Period and Burst is the most admitted at once.
//
// As a meter (Decide) a call of cost n is admitted when level + n <= Burst,
// and pours n in: exactly what the token bucket admits.
//
//   - Remaining is the whole units of free room after the call.
//   - RetryAfter is never early and at most 1 ns late; Never when n > Burst.
//   - ResetAfter is the time until the bucket is empty; TTL equals it, and
//     an empty bucket is the empty state (TTL 0).
//   - Cost 0 peeks; a denial, a peek and a cost above Burst change nothing.
//   - An instant earlier than the recorded one is treated as the recorded
//     one, so a clock going backwards never drains water.
//
// As a queue (Reserve, behind Limiter.ReserveN and WaitN) a request is
// never dropped for lack of room: Outcome.Delay is the time until the water
// already in the bucket has drained, so requests leave evenly spaced at the
// drain rate. The level may then exceed Burst (at most by
// arith.MaxDebt) and meter calls are denied until it drains. A
// reservation whose delay exceeds maxWait changes nothing and is denied
// with RetryAfter equal to that delay.
//
// # Capabilities and errors
//
// Algorithm implements ratelimit.Reserver (the queue), ratelimit.Refunder
// and ratelimit.Charger. A state it cannot decode gives
// ratelimit.ErrCorruptState.
//
// The arithmetic, its rounding and the state encoding are derived in
// docs/algorithms.md of the repository.
package leakybucket
