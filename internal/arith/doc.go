// Package arith holds the integer arithmetic shared by the algorithm
// packages: 128-bit multiply-divide with remainder, saturating duration
// sums, the clamp on instants and the bucket engine of the token and leaky
// buckets. Every function is pure and safe for concurrent use.
package arith
