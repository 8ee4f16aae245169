// Package leakybucket implements the leaky bucket as a
// ratelimit.Algorithm, as a meter and as a queue, in exact integer
// nanosecond arithmetic.
//
// # Semantics
//
// A bucket of capacity Burst holds water that drains continuously at Count
// units per Period, exactly (fractions included), and starts empty.
//
// As a meter (Decide), a call of cost n is admitted when level + n <=
// Burst, and pours n units in. This admits exactly what the token bucket
// admits (free room = Burst − level plays the role of tokens).
//
//   - Remaining is the whole units of free room after the call,
//     floor(Burst − level), 0 when the level exceeds Burst.
//   - RetryAfter, for a denied cost n, is the smallest whole number of
//     nanoseconds after which n units fit: never early, at most 1 ns late;
//     Never when n > Burst.
//   - ResetAfter is the time until the bucket is empty, rounded up, and TTL
//     equals it: after TTL the state is the empty bucket, the initial state,
//     which is written as the empty state with TTL 0.
//   - Cost 0 peeks (Allowed when one unit fits); a denial, a peek and a cost
//     above Burst change nothing.
//   - An instant earlier than the one recorded in the state is treated as
//     the recorded one (RetryAfter, ResetAfter and TTL are then measured
//     from the caller's earlier instant), so a clock going backwards never
//     drains water. Instants before −2^62 ns are treated as −2^62 ns.
//
// As a queue (Reserve, used by Limiter.Reserve and Limiter.Wait), a
// request is never dropped for lack of room: it is served once all the
// water already in the bucket has drained, and its own water is poured in
// at once. Outcome.Delay is that drain time, so requests leave evenly
// spaced at the drain rate whatever the Burst (a first request on an empty
// bucket waits 0, the next one cost·Period/Count later, and so on). The
// level may then exceed Burst, and meter calls are denied until it drains.
// A reservation whose delay would exceed maxWait changes nothing and is
// denied with RetryAfter equal to that delay; a cost above Burst is denied
// with Never as for Decide.
//
// # Arithmetic
//
// The state is W whole units of water less F/Period of a unit drained, at
// instant T (0 <= F < Period): the level is W − F/Period. At now (at least
// T), with room N = Burst − W,
//
//	total = F + (now−T)·Count                  (128-bit product)
//	N'    = N + floor(total/Period), F' = total mod Period
//
// and the bucket is empty when N' >= Burst (then W' = 0, F' = 0). Pouring
// n sets N' −= n, W' = Burst − N' and T = now. Admission compares whole
// room N' >= n, which is exact; waits round up:
//
//	wait for room x = ceil(((x−N')·Period − F')/Count)
//	queue delay     = wait for room Burst (the water draining to 0)
//
// Every product has a 128-bit intermediate; a Lua or SQL port must
// reproduce them as exact integer operations.
//
// # Debt
//
// Reserve and Charge may raise the level above Burst, up to
// Burst + MaxDebt where MaxDebt = min(floor(MaxWindowSpan·Count/Period),
// 2^50): at most a hundred years of draining. Refund never lowers the
// level below empty.
//
// # State
//
// The encoded state is 25 bytes:
//
//	byte  0      Tag (0x31: leaky bucket, encoding version 1)
//	bytes 1..8   W, int64 big-endian: whole units of water, 1..Burst+MaxDebt
//	bytes 9..16  F, int64 big-endian: drained fraction in 1/Period units
//	bytes 17..24 T, int64 big-endian: Unix nanoseconds of the last change
//
// The empty bucket is the empty state. Any other length or tag is
// ratelimit.ErrCorruptState. A state written under another Limit is still
// decoded: W is clamped to 0..Burst+MaxDebt and an F outside 0..Period−1
// is taken as 0.
//
// # Capabilities
//
// Algorithm implements ratelimit.Reserver (the queue), ratelimit.Refunder
// and ratelimit.Charger.
package leakybucket
