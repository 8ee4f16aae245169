// Package gcra implements the generic cell rate algorithm (GCRA) as a
// ratelimit.Algorithm, in exact integer nanosecond arithmetic, with one
// instant of state.
//
// # Semantics
//
// Admission is exactly the token bucket's (package tokenbucket): at most
// Burst units at once, refilled continuously at Count per Period, starting
// full; the tests check the two agree on every outcome except TTL over
// random sequences. The emission interval T = Period/Count is kept as an
// exact rational, never rounded, so the long-run rate is exactly Count per
// Period, and the burst tolerance is τ = Burst·T.
//
// The state is one instant S = TAT − τ, where TAT is the classic
// theoretical arrival time: S is the virtual instant at which the bucket
// was empty. Storing S rather than TAT keeps the stored instant at or
// before now except in debt, so now near the largest int64 never
// overflows. At now, the refill is a = now − S, clamped to τ (full); in
// tokens that is a·Count/Period.
//
//   - A call of cost n is admitted when a >= n·T; then S += n·T.
//   - Remaining is floor(a'·Count/Period) after the call (0 in debt).
//   - RetryAfter, for a denied cost n, is ceil(n·T − a): never early and at
//     most 1 ns late. It is Never when n > Burst.
//   - ResetAfter is ceil(τ − a'), the time until the bucket is full again,
//     and TTL equals it: after TTL the state is the initial state; a full
//     bucket is written as the empty state with TTL 0.
//   - Cost 0 peeks (Allowed when a >= T); a denial, a peek and a cost above
//     Burst change nothing.
//   - There is no recorded observation of the clock: an instant earlier
//     than a previous call simply sees a smaller a, so a clock going
//     backwards never mints capacity (it yields less than the token
//     bucket, which evaluates such an instant at its last update).
//     Instants before −2^62 ns are treated as −2^62 ns.
//
// # Arithmetic
//
// S is the exact rational s + f/Count nanoseconds, 0 <= f < Count. Every
// duration of the form n·Period/Count is computed exactly as a quotient and
// remainder, q = floor(n·Period/Count), r = n·Period mod Count, with a
// 128-bit product; sums and differences carry the remainder in base Count.
// Waits are the exact rational rounded up to whole nanoseconds. Writing
// S' = now − a' with a' = q + r/Count: s = now − q − 1 and f = Count − r
// when r > 0, else s = now − q and f = 0.
//
// # Debt
//
// Reserve and Charge may take units that are not available, down to
// a = −MaxDebt·T where MaxDebt = min(floor(MaxWindowSpan·Count/Period),
// 2^50) units: at most a hundred years of refill. S is also kept at most
// the largest int64. Refund never fills above Burst.
//
// # State
//
// The encoded state is 17 bytes:
//
//	byte  0      Tag (0x21: GCRA, encoding version 1)
//	bytes 1..8   s, int64 big-endian: whole nanoseconds of S
//	bytes 9..16  f, int64 big-endian: S's fraction in 1/Count ns, 0..Count−1
//
// The full bucket is the empty state. Any other length or tag is
// ratelimit.ErrCorruptState; an f outside 0..Count−1 (a state written under
// another Limit) is taken as 0.
//
// # Capabilities
//
// Algorithm implements ratelimit.Reserver (take now, wait at most maxWait),
// ratelimit.Refunder and ratelimit.Charger.
package gcra
