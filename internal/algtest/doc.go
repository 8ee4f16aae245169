// Package algtest is the standard-library part of the algorithm test
// harness: random sequences compared with a reference model, the rules
// every ratelimit.Algorithm follows, outcome invariants, extreme instants
// and limits, allocations, concurrency, the long-run rate a Limit means
// and LimitValidator refusals. The algorithms' own tests call it, and
// conformance/algotest builds its rapid-based suite on it. It is used only
// by tests.
package algtest
