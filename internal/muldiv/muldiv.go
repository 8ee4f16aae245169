// Package muldiv computes a·b/c exactly for int64 operands, through a
// 128-bit intermediate product: the one definition the contract, the
// algorithms and the stores' native ports share, so that Go, Lua and SQL
// round alike.
package muldiv

import (
	"math"
	"math/bits"
)

// Ceil returns ceil(a·b/c) for non-negative a, b and positive c, 0 when
// any of them is not, saturating at the largest int64.
func Ceil(a, b, c int64) int64 {
	if a <= 0 || b <= 0 || c <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, r := bits.Div64(hi, lo, uint64(c))
	if r != 0 {
		q++
	}
	return int64(min(q, math.MaxInt64))
}

// Floor returns floor(a·b/c) for non-negative a, b and positive c, 0 when
// any of them is not, saturating at the largest int64.
func Floor(a, b, c int64) int64 {
	if a <= 0 || b <= 0 || c <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(min(q, math.MaxInt64))
}
