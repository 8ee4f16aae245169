package arith

import (
	"math/bits"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// Bucket is a token level that refills at Count per Period, exactly: at the
// instant T the bucket holds N + F/Period tokens, N whole (negative in
// debt) and F in 0..Period-1 the fractional refill in units of 1/Period
// token. The token bucket uses it directly; the leaky bucket uses it with
// N = Burst − water.
type Bucket struct {
	// N is the whole token count at T, -MaxDebt..Burst.
	N int64
	// F is the fractional token at T in units of 1/Period, 0..Period-1.
	F int64
	// T is the instant of the level, Unix nanoseconds.
	T int64
	// Full reports that the bucket holds Burst tokens: the initial state.
	Full bool
}

// Full returns the full bucket at now.
func Full(now int64, l ratelimit.Limit) Bucket {
	return Bucket{N: l.Burst, T: now, Full: true}
}

// Settle returns the bucket that held n + f/Period tokens at t, observed
// at now >= t: the refill (now−t)·Count/Period is added exactly,
//
//	total = f + (now−t)·Count      (128-bit)
//	N     = n + floor(total/Period), F = total mod Period, T = now,
//
// and a level reaching Burst becomes the full bucket (N = Burst, F = 0).
// An f outside 0..Period-1 is taken as 0 and a level below -MaxDebt(l) as
// -MaxDebt(l), so a state written under another limit stays usable.
func Settle(n, f, t, now int64, l ratelimit.Limit) Bucket {
	if f < 0 || f >= int64(l.Period) {
		f = 0
	}
	if n < 0 {
		if d := MaxDebt(l); n < -d {
			n, f = -d, 0
		}
	}
	n = min(n, l.Burst)
	if n == l.Burst {
		return Full(now, l)
	}
	e := Since(now, t)
	hi, lo := bits.Mul64(e, uint64(l.Count))
	var c uint64
	lo, c = bits.Add64(lo, uint64(f), 0)
	hi += c
	// floor(total/Period) >= Burst−n exactly when total >= (Burst−n)·Period,
	// so a bucket that refills to Burst costs no division. Otherwise the
	// quotient is below Burst−n < 2^63, so the division cannot overflow.
	kh, kl := bits.Mul64(uint64(l.Burst-n), uint64(l.Period))
	if hi > kh || (hi == kh && lo >= kl) {
		return Full(now, l)
	}
	q, r := bits.Div64(hi, lo, uint64(l.Period))
	return Bucket{N: n + int64(q), F: int64(r), T: now}
}

// Wait returns the shortest wait after which the bucket holds x whole
// tokens if nothing is taken: 0 when N >= x, else
//
//	ceil(((x−N)·Period − F) / Count)
//
// computed with a 128-bit intermediate; x−N must not exceed
// Burst+MaxDebt, which keeps the result under 2·MaxWindowSpan.
func (b Bucket) Wait(x int64, l ratelimit.Limit) time.Duration {
	if b.N >= x {
		return 0
	}
	hi, lo := bits.Mul64(uint64(x-b.N), uint64(l.Period))
	var br uint64
	lo, br = bits.Sub64(lo, uint64(b.F), 0)
	hi -= br
	if hi >= uint64(l.Count) {
		return ratelimit.Never
	}
	q, r := bits.Div64(hi, lo, uint64(l.Count))
	if r != 0 {
		q++
	}
	if q >= uint64(ratelimit.Never) {
		return ratelimit.Never
	}
	return time.Duration(q)
}
