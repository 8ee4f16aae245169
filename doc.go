// Package sluice limits how often something may happen, per key, in one
// process or across a fleet, with the same exact answers either way.
//
//	lim, err := sluice.New(sluice.Rule{
//		Name:      "api",
//		Algorithm: gcra.New(),
//		Limit:     sluice.PerSecond(10).WithBurst(20),
//	})
//	...
//	d, err := lim.Allow(ctx, userID)
//	if !d.Allowed {
//		// answer 429, Retry-After: d.RetryAfter
//	}
//
// A [Limiter] enforces one [Rule]; a [Composite] checks several rules (per
// IP, per user, global) as one atomic step: the strictest decides and
// nothing is taken on denial. Without [WithStore] every limiter keeps its
// buckets in one process-wide memory store, shared by rule name; choosing
// Redis, PostgreSQL or a gossip cluster is one option. Algorithms live in
// github.com/sluicehq/sluice/algorithms; the contract for writing your own
// algorithm or store is package github.com/sluicehq/sluice/core/ratelimit.
//
// # Limits
//
// A [Limit] means the same for every algorithm: the long-run rate is
// Count per Period and Burst is the most admitted at once.
//
//	algorithm       Count/Period               Burst
//	tokenbucket     refill rate                bucket size
//	gcra            emission rate              tolerance, in units
//	leakybucket     drain rate                 bucket (meter) size
//	fixedwindow     Burst per window of W = Burst·Period/Count, epoch-aligned
//	slidinglog      Burst per sliding window of W, exactly
//	slidingwindow   Burst per sliding window of W, estimated and rounded up
//	                (never more than the rate, about Burst−1 per W under load)
//
// The window algorithms refuse a limit whose window is not a whole number
// of nanoseconds (errors wrap ErrInvalid). [Limiter.SetRule] changes a rule
// while it runs, keeping every bucket's state; [Limiter.AllowWithLimit]
// passes a limit per call (a plan's); [Unlimited] admits everything.
//
// # Failures
//
// A limiter never takes down the service it protects. Each rule has a
// Budget, how long a call may wait for its store (default 5 ms for a remote
// store, none for the memory store); when the store fails or the budget or
// the caller's deadline runs out, the rule's failure policy answers:
//
//	what happened                          FailOpen                 fail closed (default)
//	store answered                         its decision, nil        its decision, nil
//	store failed or budget/deadline spent  allowed, ByPolicy, nil   denied, ByPolicy, ErrUnavailable or ErrUnknownOutcome
//	caller's context cancelled             denied, ctx error        denied, ctx error
//	bad input                              denied, ErrInvalid       denied, ErrInvalid
//
// The observer ([WithObserver]) sees every decision with the store error it
// masked. Denial is a [Decision], never an error; errors match the
// sentinels of this package with errors.Is.
package sluice
