package models

import (
	"math"
	"math/big"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// earliest is the instant before which every in-repo algorithm treats time
// as this instant.
const earliest = -1 << 62

// clampNow applies the algorithms' lower bound on instants.
func clampNow(now int64) int64 { return max(now, earliest) }

func ri(n int64) *big.Rat { return new(big.Rat).SetInt64(n) }

func add(a, b *big.Rat) *big.Rat { return new(big.Rat).Add(a, b) }
func sub(a, b *big.Rat) *big.Rat { return new(big.Rat).Sub(a, b) }
func mul(a, b *big.Rat) *big.Rat { return new(big.Rat).Mul(a, b) }
func quo(a, b *big.Rat) *big.Rat { return new(big.Rat).Quo(a, b) }

func minRat(a, b *big.Rat) *big.Rat {
	if a.Cmp(b) <= 0 {
		return a
	}
	return b
}

func maxRat(a, b *big.Rat) *big.Rat {
	if a.Cmp(b) >= 0 {
		return a
	}
	return b
}

// floor returns floor(r) as a big.Int.
func floor(r *big.Rat) *big.Int {
	q, m := new(big.Int).DivMod(r.Num(), r.Denom(), new(big.Int))
	_ = m // Euclidean division with a positive denominator is floor
	return q
}

// ceil returns ceil(r) as a big.Int.
func ceil(r *big.Rat) *big.Int {
	return new(big.Int).Neg(floor(new(big.Rat).Neg(r)))
}

// count converts a non-negative whole quantity to int64, 0 when negative
// and saturated at the largest int64.
func count(n *big.Int) int64 {
	if n.Sign() < 0 {
		return 0
	}
	if !n.IsInt64() {
		return math.MaxInt64
	}
	return n.Int64()
}

// wait converts a duration in nanoseconds to a time.Duration, 0 when
// negative and Never when it does not fit.
func wait(n *big.Int) time.Duration {
	if n.Sign() <= 0 {
		return 0
	}
	if !n.IsInt64() {
		return ratelimit.Never
	}
	return time.Duration(n.Int64())
}

// rate returns Count/Period in units per nanosecond.
func rate(l ratelimit.Limit) *big.Rat { return new(big.Rat).SetFrac64(l.Count, int64(l.Period)) }

// timeFor returns the exact time, in nanoseconds, units take to refill.
func timeFor(units *big.Rat, l ratelimit.Limit) *big.Rat { return quo(units, rate(l)) }
