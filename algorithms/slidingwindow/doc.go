// Package slidingwindow implements the sliding window counter as a
// ratelimit.Algorithm: a weighted estimate of the units admitted in the
// last Period from the counts of two fixed windows.
//
// # Semantics
//
// Windows of Period are aligned to multiples of Period since the Unix
// epoch, as in package fixedwindow. The quota is Burst units per sliding
// Period (Count is not used; ratelimit.Every and friends set Burst =
// Count). At an instant el nanoseconds into the current window, with cur
// units counted in it and prev in the previous window, the estimate is
//
//	estimate = cur + ceil(prev·(Period−el)/Period)     (128-bit product)
//
// rounded up, so it never under-counts: the algorithm admits no more than
// the exact weighted estimate would. A call of cost n is admitted when
// estimate + n <= Burst, and adds n to cur.
//
//   - Remaining is Burst − estimate after the call, at least 0.
//   - RetryAfter, for a denied cost n <= Burst, is exact: the smallest
//     whole number of nanoseconds after which estimate + n <= Burst if
//     nothing else is counted. Within the current window that is the first
//     offset y with y >= Period − floor(room·Period/prev), room = Burst − n −
//     cur >= 0; otherwise in the next window (where cur becomes prev and
//     room = Burst − n) by the same formula; otherwise the start of the
//     window after it. It is Never when n > Burst.
//   - ResetAfter is the time until both windows count nothing: the end of
//     the next window when cur > 0, the end of the current one when only
//     prev > 0. TTL equals it; after TTL the state is the initial state. A
//     state counting nothing is the empty state (TTL 0).
//   - Cost 0 peeks (Allowed when one unit passes); a denial, a peek and a
//     cost above Burst change nothing.
//   - An instant earlier than the recorded window's start is treated as that
//     start (RetryAfter, ResetAfter and TTL are then measured from the
//     caller's earlier instant), so a clock going backwards never discounts
//     anything. Instants before −2^62 ns are treated as −2^62 ns.
//
// # Debt
//
// Charge counts units consumed elsewhere unconditionally, so cur may push
// the estimate above Burst; RetryAfter then waits for the weight to decay.
// Each count stops at MaxCounted (2^61).
//
// # State
//
// The encoded state is 25 bytes:
//
//	byte  0      Tag (0x51: sliding window counter, encoding version 1)
//	bytes 1..8   current window start, int64 big-endian Unix nanoseconds
//	bytes 9..16  cur, int64 big-endian: count of that window
//	bytes 17..24 prev, int64 big-endian: count of the window before it
//
// At an instant one window later, cur becomes prev and cur is 0; two or
// more windows later both are 0. Nothing counted is the empty state. Any
// other length or tag is ratelimit.ErrCorruptState; counts outside
// 0..MaxCounted are clamped.
//
// # Capabilities
//
// Algorithm implements ratelimit.Charger, not Reserver nor Refunder.
package slidingwindow
