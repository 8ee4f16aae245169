// Package ratelimit defines the contract that algorithms and stores
// implement for Sluice, as database/sql/driver does for database/sql.
// Most code should use package github.com/sluicehq/sluice instead: its
// Limiter and Composite build the Checks, apply the failure policy and
// call the Store.
//
// An [Algorithm] is a pure decision function. Decide gets the algorithm's
// own encoded state (empty for a new key), the store's "now" in Unix
// nanoseconds, a [Limit] and a cost, and returns an [Outcome] and the new
// state: no I/O, no clock, no globals, no allocation when dst has room.
// Undecodable state is [ErrCorruptState]; Name changes whenever the
// encoding does. The rules every Decide follows (peeks, a cost above
// Burst, a clock going backwards, RetryAfter never early, TTL) are listed
// on [Algorithm].
//
// A [Store] applies a [Check] atomically at its own clock: Apply for one,
// ApplyAll for several, all or nothing; Reset; Close. It is safe for
// concurrent use, honours every context, and keeps state as opaque bytes
// under (Namespace, Key), both arbitrary bytes never read as syntax. A
// store that runs [Evaluate] inside its lock or transaction supports every
// algorithm, including ones written after it; a native fast path (a Redis
// Lua script chosen by Name) must give exactly what Evaluate gives.
// Stores that keep their own time read it from a [Clock].
//
// Optional capabilities are found by type assertion:
//
//   - [Reserver] (Algorithm): take now and wait, for ReserveN and WaitN;
//   - [Refunder] (Algorithm): give units back, for Reservation.Cancel;
//   - [Charger] (Algorithm): record use seen elsewhere, into debt (the
//     gossip cluster needs it);
//   - [LimitValidator] (Algorithm): refuse a valid Limit it cannot honour
//     exactly instead of reinterpreting it;
//   - [Budgeter] (Store): how long a call may wait for the store before
//     the rule's failure policy answers (0 for stores without I/O);
//   - [DeadlineApplier] (Store): calls bounded by a deadline passed as a
//     value, enforced by the store without a context per call.
//
// Evaluate answers [ErrUnsupported] for an operation whose capability the
// algorithm lacks.
//
// Denial is an Outcome with Allowed false, never an error. Every error
// wraps a sentinel, and its class tells a failure policy what happened:
//
//   - [ErrInvalid] (wrapped by every ErrInvalid… error): the caller's
//     mistake, nothing changed;
//   - [ErrUnavailable]: the operation certainly did not happen;
//   - [ErrUnknownOutcome]: it may have happened (a reply lost after the
//     request was sent), so retrying may spend twice;
//   - [ErrCorruptState], [ErrUnsupported], [ErrClosed].
//
// All arithmetic is integers, units and nanoseconds, with 128-bit
// intermediate products that saturate instead of overflowing, inside
// [MaxCount], [MaxPeriod] and [MaxWindowSpan], so Go, Lua and SQL ports
// compute bit-identical results. Floats drift; they are not used.
//
// Prove an implementation with the suites of module
// github.com/sluicehq/sluice/conformance: algotest.Run(t, alg) for an
// Algorithm, storetest.Run(t, harness) for a Store. docs/contract.md
// walks through the contract:
// https://github.com/sluicehq/sluice/blob/main/docs/contract.md
package ratelimit
