// Package fixedwindow implements the fixed window counter as a
// ratelimit.Algorithm.
//
// # Semantics
//
// Time is cut into windows of Period aligned to multiples of Period since
// the Unix epoch: the window of instant t starts at t − (t mod Period),
// with mod rounding toward negative infinity. Each window admits Burst
// units: Burst is the per-window quota. Count is not used; build limits
// with ratelimit.Every, PerSecond, PerMinute or PerHour, which set Burst =
// Count, so that "Count per Period" reads as the quota. A call of cost n
// is admitted when used + n <= Burst, where used is the count of the
// current window.
//
//   - Remaining is Burst − used after the call, at least 0.
//   - RetryAfter, for a denied cost n <= Burst, is the time until the start
//     of the first window in which n fits: the next window, or a later one
//     when a charge carried a count over (see Debt). It is exact and never
//     early. It is Never when n > Burst.
//   - ResetAfter is the time until the start of the first window with
//     nothing counted, and TTL equals it: after TTL the state is the
//     initial state. A state with nothing counted is the empty state (TTL 0).
//   - Cost 0 peeks (Allowed when one unit fits); a denial, a peek and a cost
//     above Burst change nothing.
//   - An instant earlier than the recorded window's start is treated as that
//     start (RetryAfter, ResetAfter and TTL are then measured from the
//     caller's earlier instant), so a clock going backwards never reopens a
//     window. Instants before −2^62 ns are treated as −2^62 ns.
//
// All arithmetic is on int64 with no rounding: the window start is
// t − floorMod(t, Period) and waits are whole multiples of Period minus the
// time elapsed in the window, so a Lua or SQL port reproduces it directly.
//
// # Debt
//
// Charge counts units consumed elsewhere unconditionally, so a count may
// exceed Burst. The excess carries over: k windows after the recorded one,
// the count is max(0, count − k·Burst), so the long-run admitted rate stays
// at most Burst per Period. Counts are capped at
// Burst·(MaxWindowSpan/Period + 1) (at most 2^62; MaxUsed).
//
// # State
//
// The encoded state is 17 bytes:
//
//	byte  0      Tag (0x41: fixed window, encoding version 1)
//	bytes 1..8   window start, int64 big-endian Unix nanoseconds
//	bytes 9..16  count in that window, int64 big-endian, >= 1
//
// Nothing counted is the empty state. Any other length or tag is
// ratelimit.ErrCorruptState. A count outside 0..the cap (for example
// written under another Limit) is clamped.
//
// # Capabilities
//
// Algorithm implements ratelimit.Charger. It implements neither Reserver
// nor Refunder: a window has no notion of a future slot to reserve.
package fixedwindow
