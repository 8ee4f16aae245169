// Package storetest is the conformance suite for ratelimit.Store
// implementations: the in-repo stores and any third party's.
//
// It is shaped like testing/fstest.TestFS: the implementer describes how
// to reach its store in a [Harness] and calls [Run] from an ordinary test;
// the suite exercises the store from several independent clients and
// reports every misbehaviour as a failed subtest whose name says what
// broke, for example
//
//	--- FAIL: TestStore/Contention/testalg-window
//	    contention.go:71: round 2: 101 of 640 calls allowed, want exactly 100
//
// What it checks: decisions equal the algorithm's own sequential result
// (the generic path) for every algorithm and operation, and, for the
// in-repo algorithms, the independent reference model of package
// github.com/sluicehq/sluice/conformance/models; exact admission
// under contention across several store instances; linearizability of
// concurrent histories (github.com/anishathalye/porcupine, partitioned by
// key); composites that are all or nothing, free of deadlock when callers
// name keys in opposite orders, and that apply the same key twice in order;
// key and namespace isolation for arbitrary key bytes; a change of a
// key's limit, which keeps its state (no reset, no fresh burst); TTL of
// idle keys; Reset; Peek; Close; cancelled contexts and deadlines; bad
// input, the unlimited Limit included (typed error matching
// ratelimit.ErrInvalid, state unchanged); state another algorithm cannot
// decode
// (ErrCorruptState, left as is, cleared by Reset); and, when the harness
// can stop the server, typed errors while it is down, no goroutine leak
// and recovery.
//
// Every call to the store runs with a deadline (Harness.CallTimeout) under
// a watchdog: a call that does not return in time, or that panics, fails
// the check that made it, and the other checks still run.
//
// An approximate store, such as a gossip cluster whose nodes decide
// locally, declares the bound it keeps in Harness.Approximate: the suite
// then skips the checks that only an exact store can pass, checks
// concurrent admission against the bound, and waits a few seconds for
// each write to become visible through the other clients instead of
// expecting it on the next call.
//
// A store that accepts an injected clock lets the suite compare whole
// outcomes at fixed instants (see [Clock]); otherwise the suite uses limits
// whose refill is negligible for the duration of the test, so admission
// and remaining counts are exact whatever the server's time.
//
// What each subtest's failure means, and its usual cause, is tabled in
// docs/contract.md:
// https://github.com/sluicehq/sluice/blob/main/docs/contract.md#proving-it
package storetest
