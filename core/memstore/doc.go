// Package memstore is the embedded in-memory ratelimit.Store: the default
// store of a sluice.Limiter, and the one to pass to sluice.WithStore when a
// limiter needs counters of its own.
//
//	st, err := memstore.New()
//	lim, err := sluice.New(rule, sluice.WithStore(st))
//
// Guarantees:
//
//   - Exact: each key is decided under its shard's mutex at an instant
//     that lies within the call and never precedes an instant already
//     decided under that mutex (the system clock is read just before the
//     lock and raised to the latest such instant; an injected clock is
//     read under the lock), so concurrent calls are linearizable and
//     ApplyAll is all or nothing.
//   - Zero allocations per decision for an existing key whose state fits
//     inline (31 bytes: every in-repo algorithm but the sliding log).
//   - Bounded memory without a goroutine: each insert examines a few
//     entries and drops those whose TTL passed more than a grace period ago
//     (DefaultReclaimGrace, see WithReclaimGrace). Dropping expired state
//     changes nothing by the Algorithm contract; the grace only spares hot
//     keys with tiny TTLs a delete and a re-insert. A key costs a 64-byte
//     entry in an open-addressed table kept 64% to 80% full (80 to 100
//     bytes), which holds keys of up to 16 bytes; a longer key costs its
//     bytes and a string header more.
//   - Bounded pauses: a table grows or splits in the inserting call, under
//     its shard's lock, moving at most 4096 entries whatever the number of
//     keys.
//   - The clock is ratelimit.SystemClock unless WithClock injects another
//     (tests).
//   - No I/O: it reports a default budget of 0 (ratelimit.Budgeter), so a
//     Limiter sets no deadline on its calls.
//
// The hot path and the argument for the clock are in docs/memory.md of
// the repository.
//
// Errors wrap the ratelimit sentinels: invalid input (nothing changed),
// ratelimit.ErrCorruptState, ratelimit.ErrUnsupported and, after Close,
// ratelimit.ErrClosed. A context that has ended is reported before
// anything is applied.
package memstore
