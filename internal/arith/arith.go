package arith

import (
	"encoding/binary"
	"math"
	"math/bits"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/muldiv"
)

// MinNow is the earliest instant the algorithms distinguish, -2^62 ns
// (about the year 1823). Earlier instants are treated as MinNow so that
// subtracting a window or a burst from an instant never overflows.
const MinNow = -(1 << 62)

// ClampNow returns now, or MinNow when now is earlier.
func ClampNow(now int64) int64 {
	if now < MinNow {
		return MinNow
	}
	return now
}

// MulDivRem returns floor(a·b/c) and a·b mod c for a, b >= 0 and c > 0,
// computed with a 128-bit product. ok is false when the quotient does not
// fit in an int64.
func MulDivRem(a, b, c int64) (q, r int64, ok bool) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return 0, 0, false
	}
	uq, ur := bits.Div64(hi, lo, uint64(c))
	if uq > math.MaxInt64 {
		return 0, 0, false
	}
	return int64(uq), int64(ur), true
}

// AddDur returns a+b for non-negative a and b, saturating at
// ratelimit.Never.
func AddDur(a, b time.Duration) time.Duration {
	if a < 0 {
		a = 0
	}
	if b < 0 {
		b = 0
	}
	if a > ratelimit.Never-b {
		return ratelimit.Never
	}
	return a + b
}

// Since returns later-earlier for later >= earlier as an unsigned count of
// nanoseconds, exact for every pair of int64 instants.
func Since(later, earlier int64) uint64 {
	return uint64(later) - uint64(earlier)
}

// AppendInt64 appends v to dst as 8 big-endian bytes.
func AppendInt64(dst []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(v))
}

// Int64 reads 8 big-endian bytes of b as an int64; b must have 8 bytes.
func Int64(b []byte) int64 {
	return int64(binary.BigEndian.Uint64(b))
}

// FloorMod returns now mod p in 0..p-1 for p > 0.
func FloorMod(now, p int64) int64 {
	m := now % p
	if m < 0 {
		m += p
	}
	return m
}

// MaxDebt returns the deepest debt, in units, that an algorithm may record
// for l when it reserves ahead or is charged for consumption seen
// elsewhere: floor(MaxWindowSpan·Count/Period), at most 2^50. Repaying it
// takes at most MaxWindowSpan, so every wait stays inside int64
// nanoseconds. The in-repo algorithms and their native ports (the Redis
// Lua scripts) share this one definition.
func MaxDebt(l ratelimit.Limit) int64 {
	return min(muldiv.Floor(int64(ratelimit.MaxWindowSpan), l.Count, int64(l.Period)), 1<<50)
}

// MulDivCeil returns ceil(a·b/c) as a duration, saturating at
// ratelimit.Never; see muldiv.Ceil.
func MulDivCeil(a, b, c int64) time.Duration { return time.Duration(muldiv.Ceil(a, b, c)) }
