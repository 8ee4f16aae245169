// Package ratelimit is Sluice's algorithm-agnostic core: what a limit, a
// decision, an algorithm and a store are, and the Limiter that ties them
// together.
//
// The pieces:
//
//   - [Limit] is an integer rate (Count per Period) with a Burst.
//   - [Algorithm] is a pure decision function over a compact byte state
//     (packages under github.com/sluicehq/sluice/algorithms implement it).
//   - [Store] applies algorithms atomically, using its own clock. The
//     embedded [MemoryStore] is the default; Redis, PostgreSQL and a
//     gossip cluster live in their own modules.
//   - [Limiter] is the type most callers want: Allow, AllowN, Reserve,
//     Wait, Peek and Reset for one [Rule]; [Composite] checks several rules
//     at once, all or nothing.
//
// Denial is a [Decision] with Allowed == false, never an error. Errors are
// sentinels matched with [errors.Is]: [ErrInvalidLimit], [ErrInvalidKey],
// [ErrInvalidCost], [ErrInvalidRule], [ErrUnavailable],
// [ErrUnknownOutcome], [ErrClosed] and others declared in errors.go.
//
// All time arithmetic is integer nanoseconds so that every store computes
// bit-identical results.
package ratelimit
