package arith

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// settleRef is Settle computed with math/big, dividing every time: the
// reference for Settle's division-free test of a refill to Burst.
func settleRef(n, f, t, now int64, l ratelimit.Limit) Bucket {
	if f < 0 || f >= int64(l.Period) {
		f = 0
	}
	if d := MaxDebt(l); n < -d {
		n, f = -d, 0
	}
	n = min(n, l.Burst)
	if n == l.Burst {
		return Full(now, l)
	}
	e := new(big.Int).SetUint64(Since(now, t))
	total := e.Mul(e, big.NewInt(l.Count))
	total.Add(total, big.NewInt(f))
	q, r := new(big.Int).QuoRem(total, big.NewInt(int64(l.Period)), new(big.Int))
	if q.Cmp(big.NewInt(l.Burst-n)) >= 0 {
		return Full(now, l)
	}
	return Bucket{N: n + q.Int64(), F: r.Int64(), T: now}
}

func TestSettleMatchesBigReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	limits := []ratelimit.Limit{
		{Count: 1, Period: 1, Burst: 1},
		{Count: 3, Period: time.Second, Burst: 4},
		{Count: 1 << 30, Period: time.Second, Burst: 1 << 30},
		{Count: ratelimit.MaxCount, Period: 1, Burst: ratelimit.MaxCount},
		{Count: 1, Period: ratelimit.MaxPeriod, Burst: 10},
		{Count: 7, Period: 1000 * time.Hour, Burst: 100},
	}
	for range 200 {
		c := rng.Int64N(ratelimit.MaxCount) + 1
		p := time.Duration(rng.Int64N(int64(ratelimit.MaxPeriod)) + 1)
		l := ratelimit.Limit{Count: c, Period: p, Burst: rng.Int64N(c) + 1}
		if l.Validate() == nil {
			limits = append(limits, l)
		}
	}
	for _, l := range limits {
		d := MaxDebt(l)
		fill := MulDivCeil(l.Burst, int64(l.Period), l.Count)
		for range 200 {
			n := []int64{l.Burst, l.Burst - 1, 0, -1, -d, -d - 1, math.MinInt64, math.MaxInt64, rng.Int64N(l.Burst+d+1) - d}[rng.IntN(9)]
			f := []int64{0, 1, int64(l.Period) - 1, int64(l.Period), -1, rng.Int64N(int64(l.Period))}[rng.IntN(6)]
			now := []int64{0, math.MaxInt64, MinNow, rng.Int64()}[rng.IntN(4)]
			// e around the time to refill exactly, and extremes.
			var e uint64
			switch rng.IntN(5) {
			case 0:
				e = uint64(rng.Int64N(int64(fill) + 2))
			case 1:
				e = boundary(n, f, l) + uint64(rng.IntN(3)) - 1
			case 2:
				e = math.MaxUint64 - uint64(rng.IntN(2))
			case 3:
				e = 0
			default:
				e = rng.Uint64()
			}
			tt := int64(uint64(now) - e)
			if tt > now {
				tt = now // keep t <= now, as the callers do
			}
			got, want := Settle(n, f, tt, now, l), settleRef(n, f, tt, now, l)
			if got != want {
				t.Fatalf("Settle(%d, %d, %d, %d, %v) = %+v, want %+v", n, f, tt, now, l, got, want)
			}
		}
	}
}

// boundary returns the least refill time, in ns, after which the bucket of
// n + f/Period tokens is full: ceil(((Burst−n)·Period − f)/Count) with n
// and f sanitised as Settle does.
func boundary(n, f int64, l ratelimit.Limit) uint64 {
	if f < 0 || f >= int64(l.Period) {
		f = 0
	}
	if d := MaxDebt(l); n < -d {
		n, f = -d, 0
	}
	n = min(n, l.Burst)
	need := new(big.Int).Mul(big.NewInt(l.Burst-n), big.NewInt(int64(l.Period)))
	need.Sub(need, big.NewInt(f))
	need.Add(need, big.NewInt(l.Count-1))
	return need.Quo(need, big.NewInt(l.Count)).Uint64()
}
