// Package slidinglog implements the sliding log as a ratelimit.Algorithm:
// an exact count of the units admitted in the last Period, at the price of
// a state that grows with the traffic.
//
// # Semantics
//
// The log records, for each admitted call, its instant and cost. Units
// logged at instant ts count at instant t while t − ts < Period. A call of
// cost n at now is admitted when the units counting at now plus n are at
// most Burst (Burst is the quota per sliding Period; Count is not used, and
// ratelimit.Every and friends set Burst = Count), and is then logged at
// now. There is no rounding: all arithmetic is int64 additions and
// comparisons.
//
//   - Remaining is Burst minus the units counting after the call, at
//     least 0.
//   - RetryAfter, for a denied cost n <= Burst, is exact: walking the log
//     oldest first and summing counts, the entry at which the sum reaches
//     used + n − Burst expires at its instant + Period; RetryAfter is the
//     time until then. It is Never when n > Burst.
//   - ResetAfter is the time until the newest entry expires, and TTL equals
//     it; after TTL the log counts nothing, which is the initial state. A
//     log with nothing counting is written as the empty state (TTL 0).
//   - Cost 0 peeks (Allowed when one unit fits); a denial, a peek and a cost
//     above Burst change nothing.
//   - An instant earlier than the newest entry is treated as that entry's
//     instant (RetryAfter, ResetAfter and TTL are then measured from the
//     caller's earlier instant), so a clock going backwards never expires
//     anything early. Instants before −2^62 ns are treated as −2^62 ns.
//
// # State size
//
// The state is O(Burst): one entry per distinct instant of an admitted call
// in the last Period (calls at the same instant share an entry), so at most
// Burst entries of at most 20 bytes each. It usually exceeds the 31 bytes a
// MemoryStore keeps inline, and Decide costs O(entries). Prefer the sliding
// window counter (package slidingwindow) for large quotas; use the log when
// exactness matters and Burst is small.
//
// # State
//
// The encoded state is
//
//	byte  0      Tag (0x61: sliding log, encoding version 1)
//	bytes 1..8   base, int64 big-endian Unix nanoseconds
//	then, for each entry, oldest first:
//	  uvarint  delta: the entry's instant minus the previous entry's
//	           (minus base for the first entry, which this package writes
//	           as 0)
//	  uvarint  count, >= 1
//
// with at least one entry. Expired entries are dropped whenever the log is
// written. A truncated varint, a count of 0, an instant past the largest
// int64, counts summing past 2^62, a missing entry, or another tag is
// ratelimit.ErrCorruptState. Decide appends the new state to dst[:0], which
// must not overlap the input state.
//
// # Capabilities
//
// Algorithm implements no optional capability.
package slidinglog
