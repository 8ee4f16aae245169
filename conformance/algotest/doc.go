// Package algotest is the conformance suite for ratelimit.Algorithm
// implementations: what every algorithm, in-repo or third-party, must
// satisfy before any store runs it.
//
// An implementer calls Run from an ordinary test:
//
//	func TestConformance(t *testing.T) {
//		algotest.Run(t, myalg.New(), algotest.WithModel(mymodel{}))
//	}
//
// Run checks, on sequences generated with pgregory.net/rapid and at fixed
// instants (no sleeping):
//
//   - Model: with WithModel, every decision equals the reference model's
//     (Allowed, Remaining, RetryAfter, ResetAfter);
//   - Contract: cost 0 peeks and changes nothing; a cost above Burst is
//     denied with RetryAfter Never and changes nothing; a denial changes
//     nothing (so a peek returns the state byte for byte: the encoding
//     round-trips); Changed is true exactly when the state bytes change; the
//     input state is never modified; decisions are deterministic;
//     RetryAfter is 0 when allowed, otherwise positive and exact (waiting
//     RetryAfter admits the same cost, waiting 1 ns less does not);
//     Remaining is within 0..Burst; no duration is negative;
//   - ClockBackwards: an earlier instant never reports more capacity than
//     a later one for the same state, and a clock swinging back and forth
//     admits no more than it could moving forward;
//   - TTL: at and after TTL the state decides exactly like no state, and
//     after ResetAfter the key is fully available;
//   - Edges: int64 extremes of time, the largest limits and costs, and
//     idle gaps of centuries neither overflow nor panic;
//   - Garbage: random and mutated states give ErrCorruptState or a valid
//     decision, never a panic or another error;
//   - Allocs: Decide on an existing state with enough dst capacity does not
//     allocate;
//   - Concurrent: Decide is safe to call from many goroutines at once;
//   - Capabilities: Reserve honours maxWait and changes nothing when it
//     refuses, Refund never lowers availability nor raises it above a new
//     key's, Charge never fails and never raises availability;
//   - Rate: what a Limit means, at fixed instants: a greedy client is
//     admitted at most Burst at one instant, and over twenty refills of
//     the burst Count/Period within one Burst (WithUnderAdmission: at
//     most Count/Period plus Burst);
//   - ValidateLimit: a limit the algorithm's ratelimit.LimitValidator
//     refuses is refused with an error wrapping ErrInvalidLimit, by
//     ValidateLimit and by ratelimit.Check.Validate alike. Generated
//     sequences use only the limits the algorithm accepts.
//
// Subtests are named after these groups, so a failure says what broke; it
// prints the shrunk sequence and a -rapid.seed to replay it. WithLimits
// replaces the limits sequences are drawn under (DefaultLimits). The
// rules come from ratelimit.Algorithm; docs/contract.md explains them:
// https://github.com/sluicehq/sluice/blob/main/docs/contract.md
package algotest
