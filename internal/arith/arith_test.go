package arith

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

func TestMulDivRem(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	cases := [][3]int64{
		{0, 5, 3}, {7, 3, 2}, {math.MaxInt64, 1, 1}, {math.MaxInt64, 2, 1},
		{math.MaxInt64, math.MaxInt64, math.MaxInt64}, {1 << 40, int64(ratelimit.MaxPeriod), 3},
	}
	for range 1000 {
		cases = append(cases, [3]int64{rng.Int64(), rng.Int64N(1 << 60), rng.Int64N(1<<62) + 1})
	}
	for _, c := range cases {
		q, r, ok := MulDivRem(c[0], c[1], c[2])
		p := new(big.Int).Mul(big.NewInt(c[0]), big.NewInt(c[1]))
		wq, wr := new(big.Int).QuoRem(p, big.NewInt(c[2]), new(big.Int))
		if fits := wq.IsInt64(); ok != fits || ok && (q != wq.Int64() || r != wr.Int64()) {
			t.Fatalf("MulDivRem(%d, %d, %d) = %d, %d, %v; want %s, %s", c[0], c[1], c[2], q, r, ok, wq, wr)
		}
	}
}

func TestAddDur(t *testing.T) {
	for _, c := range []struct{ a, b, want time.Duration }{
		{1, 2, 3}, {ratelimit.Never, 1, ratelimit.Never}, {ratelimit.Never - 1, 1, ratelimit.Never},
		{-5, 3, 3}, {ratelimit.Never / 2, ratelimit.Never/2 + 2, ratelimit.Never},
	} {
		if got := AddDur(c.a, c.b); got != c.want {
			t.Errorf("AddDur(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestFloorModAndClamp(t *testing.T) {
	for _, c := range [][3]int64{{7, 3, 1}, {-7, 3, 2}, {-9, 3, 0}, {math.MinInt64, 1e9, 145224192}, {math.MaxInt64, 1e9, 854775807}} {
		if got := FloorMod(c[0], c[1]); got != c[2] {
			t.Errorf("FloorMod(%d, %d) = %d, want %d", c[0], c[1], got, c[2])
		}
	}
	if ClampNow(math.MinInt64) != MinNow || ClampNow(5) != 5 {
		t.Error("ClampNow")
	}
}

func TestSettleAndWait(t *testing.T) {
	l := ratelimit.Limit{Count: 3, Period: 10, Burst: 5}
	// 1 token and 4/10 of one at t=100; 7 ns later 21/10 more: 3.5 tokens.
	b := Settle(1, 4, 100, 107, l)
	if b != (Bucket{N: 3, F: 5, T: 107}) {
		t.Fatalf("Settle = %+v", b)
	}
	// 4 tokens need 0.5 more: ceil(5/3) = 2 ns; 5 need 1.5: ceil(15/3) = 5 ns.
	if w := b.Wait(4, l); w != 2 {
		t.Fatalf("Wait(4) = %d", w)
	}
	if w := b.Wait(5, l); w != 5 {
		t.Fatalf("Wait(5) = %d", w)
	}
	if w := b.Wait(3, l); w != 0 {
		t.Fatalf("Wait(3) = %d", w)
	}
	if f := Settle(1, 4, 100, 112, l); !f.Full || f.N != 5 || f.T != 112 {
		t.Fatalf("Settle to full = %+v", f)
	}
	// Extreme gaps, debts and garbage fractions never overflow.
	for _, c := range [][4]int64{
		{math.MinInt64, 0, math.MinInt64, math.MaxInt64},
		{-1 << 62, math.MaxInt64, 0, 0},
		{4, -1, math.MinInt64, math.MaxInt64},
	} {
		b := Settle(c[0], c[1], c[2], c[3], l)
		if b.N < -MaxDebt(l) || b.N > l.Burst || b.F < 0 || b.F >= int64(l.Period) {
			t.Fatalf("Settle%v = %+v", c, b)
		}
		if w := b.Wait(l.Burst, l); w < 0 || w > 2*ratelimit.MaxWindowSpan {
			t.Fatalf("Wait after Settle%v = %d", c, w)
		}
	}
}
