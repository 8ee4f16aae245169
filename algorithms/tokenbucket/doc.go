// Package tokenbucket implements the token bucket as a
// ratelimit.Algorithm, in exact integer nanosecond arithmetic.
//
// # Semantics
//
// A bucket holds at most Burst tokens and starts full. It refills
// continuously at Count tokens per Period, exactly: after t nanoseconds it
// has gained t·Count/Period tokens, fractions included, so the long-run
// rate is exactly Count per Period and never more. A call of cost n is
// admitted when the bucket holds at least n whole tokens, and takes them.
//
//   - Remaining is the whole tokens left after the call (0 in debt).
//   - RetryAfter, for a denied cost n, is the smallest whole number of
//     nanoseconds after which the bucket holds n tokens:
//     ceil(((n−N)·Period − F)/Count), so it is never early and never more
//     than 1 ns late. It is Never when n > Burst.
//   - ResetAfter is the time until the bucket is full again,
//     ceil(((Burst−N)·Period − F)/Count), and TTL equals it: after TTL the
//     state is the full bucket, which is the initial state, and a full
//     bucket is written as the empty state with TTL 0.
//   - Cost 0 peeks (Allowed when one token is available); a denial, a peek
//     and a cost above Burst change nothing.
//   - An instant earlier than the one recorded in the state is treated as
//     the recorded one (RetryAfter, ResetAfter and TTL are then measured
//     from the caller's earlier instant), so a clock going backwards never
//     mints tokens. Instants before −2^62 ns are treated as −2^62 ns.
//
// # Arithmetic
//
// The state is N whole tokens plus F/Period of a token at instant T (0 <=
// F < Period). At now (at least T) the bucket holds
//
//	total = F + (now−T)·Count                  (128-bit product)
//	N'    = N + floor(total/Period), F' = total mod Period
//
// and is full when N' >= Burst (then N' = Burst, F' = 0). Taking n sets
// N' −= n and records T = now. Rounding: the level is the exact rational
// N'+F'/Period; admission compares its whole part N' with n, which is exact
// because n is an integer; waits round up. Every product has a 128-bit
// intermediate (ratelimit.MulDivCeil and math/bits); a Lua or SQL port must
// reproduce these as exact integer operations.
//
// # Debt
//
// Reserve and Charge may take tokens the bucket does not hold, down to
// N = −MaxDebt where MaxDebt = min(floor(MaxWindowSpan·Count/Period), 2^50):
// at most a hundred years of refill. Refund never fills above Burst.
//
// # State
//
// The encoded state is 25 bytes:
//
//	byte  0      Tag (0x11: token bucket, encoding version 1)
//	bytes 1..8   N, int64 big-endian: whole tokens at T, −MaxDebt..Burst−1
//	bytes 9..16  F, int64 big-endian: fractional token in 1/Period units
//	bytes 17..24 T, int64 big-endian: Unix nanoseconds of the last change
//
// The full bucket is the empty state. Any other length or tag is
// ratelimit.ErrCorruptState. A state written under another Limit is still
// decoded: N is clamped to −MaxDebt..Burst and an F outside 0..Period−1
// is taken as 0.
//
// # Capabilities
//
// Algorithm implements ratelimit.Reserver (take now, wait at most maxWait),
// ratelimit.Refunder and ratelimit.Charger. Admission is identical to the
// gcra package's; the two differ only in their state encoding.
package tokenbucket
