// Package algtest holds the test harness shared by the algorithm
// packages' tests: random sequences compared with a reference model, the
// rules every ratelimit.Algorithm follows, and the zero-allocation check.
// It is used only by tests.
package algtest
