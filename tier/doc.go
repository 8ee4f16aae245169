// Package tier is a ratelimit.Store decorator that puts a local tier in
// front of an exact shared store (redisstore, pgstore): it decides most
// checks in process and asks the shared store only for the rest, within a
// stated bound of what the shared store alone would admit.
//
// Wrap the store every process shares and choose a mode per rule (the
// Check namespace, which a Limiter sets to its rule's name):
//
//	st, err := tier.New(redisStore,
//		tier.WithRule("api", tier.Rule{Mode: tier.Lease, Nodes: 4}),
//		tier.WithRule("search", tier.Rule{Mode: tier.Sync, Nodes: 4}),
//	)
//	lim, err := sluice.New(rule, sluice.WithStore(st))
//	defer st.Close() // refunds unspent leases, pushes sync views
//
// Modes (docs/tier.md derives each bound; r = Count/Period, B = Burst):
//
//   - Exact (the default) passes every check through: the Store is then
//     the backing store, and passes its conformance suite.
//   - Lease takes units in leases sized from B, r, LeaseTTL, Nodes and the
//     level the backing store last reported (1/Nodes of each, doubling
//     while leases run out fast, down to the cost itself near exhaustion,
//     where decisions are exact) and spends them locally; unspent units
//     are refunded when a lease expires and on Close. A denial of the
//     backing store is reused until its RetryAfter. Over any interval
//     starting at a the admitted units are at most what the backing store
//     would admit plus H(a), the units leases hold at a; from a full
//     bucket never more than B + r·T. A crash loses what the dead
//     process held (under-admission, at most one lease per key).
//   - Sync decides from a local copy of the bucket, charges what it
//     admitted every SyncInterval S (into debt) and pulls the level back;
//     between pulls a process spends at most its demand-weighted slice of
//     the level plus r·S. Excess at most (W−1)·(B+r·S) + r·Δ + N for N
//     processes, Δ = S plus a round trip, W the sum of the slices' weights
//     (1 under steady demand); a crash adds
//     the dead process's unpushed units. Rate algorithms only (token
//     bucket, GCRA, leaky bucket as a meter); others pass through.
//   - Rule.Shards = n spreads each key over n sub-keys holding 1/n of the
//     limit each; a refused take borrows from the next sub-key, so the
//     key never admits more than one bucket and less only by
//     fragmentation (n·(cost−1) units). Under redisstore's hash tags
//     sub-key i lands in the i-th n-th of the Redis Cluster slots, so
//     the sub-keys spread over masters owning contiguous slot ranges.
//
// Peeks, reservations, refunds and charges pass through (a sharded rule
// sums its peeks and refuses the others with ErrUnsupported). ApplyAll
// passes through unchanged, so a composite is exactly as atomic as the
// backing store makes it and never reads or spends leases; a composite
// naming a sharded rule is refused with ErrUnsupported.
//
// When the backing store fails (ErrUnavailable, ErrUnknownOutcome) or a
// call runs out of its context's deadline (the rule's Budget), the Store
// is degraded: checks are decided from leases and views only, with no
// replenishment, and then fail fast with ratelimit.ErrUnavailable so that
// the rule's failure policy answers (FailOpen admits, otherwise deny);
// one call per probe interval tries the backing store, and the first
// success recovers without a restart. WithObserver reports every
// decision (local, store, degraded), lease refresh, refund, sync push,
// store error (with the shard of a sharded key) and recovery; Stats
// counts them. Outcome.Remaining and ResetAfter of local decisions are
// the process's estimates.
//
// Errors wrap the ratelimit sentinels; New returns ErrInvalidOption.
package tier
