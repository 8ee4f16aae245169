package tokenbucket_test

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/arith"
)

// TestDecideFastPathMatchesReserve checks Decide, whose admitting path
// computes the outcome inline, against Reserve with maxWait 0, which goes
// through commit: for 1 <= cost <= Burst both must give the same outcome
// and state, from random and edge states.
func TestDecideFastPathMatchesReserve(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 17))
	limits := []ratelimit.Limit{
		{Count: 1, Period: 1, Burst: 1},
		{Count: 3, Period: time.Second, Burst: 4},
		{Count: 1_000_000_000, Period: time.Second, Burst: 1_000_000_000},
		{Count: 1 << 30, Period: time.Second, Burst: 1 << 30},
		{Count: ratelimit.MaxCount, Period: ratelimit.MaxPeriod, Burst: ratelimit.MaxCount},
		{Count: 1, Period: ratelimit.MaxPeriod, Burst: 10},
		{Count: 7, Period: 1000 * time.Hour, Burst: 100},
	}
	for range 100 {
		c := rng.Int64N(ratelimit.MaxCount) + 1
		l := ratelimit.Limit{Count: c, Period: time.Duration(rng.Int64N(int64(ratelimit.MaxPeriod)) + 1), Burst: rng.Int64N(c) + 1}
		if l.Validate() == nil {
			limits = append(limits, l)
		}
	}
	alg := tokenbucket.New()
	for _, l := range limits {
		tau := arith.MulDivCeil(l.Burst, int64(l.Period), l.Count)
		for range 300 {
			now := []int64{0, 1, math.MaxInt64, math.MinInt64, arith.MinNow, rng.Int64()}[rng.IntN(6)]
			var state []byte
			if rng.IntN(4) > 0 {
				// T behind now by about the fill time, ahead of now (skew), or
				// anywhere; N full, nearly full, empty, in debt or out of range.
				tt := []int64{now - int64(tau), now - int64(tau) + 1, now - 1, now, now + 1, math.MaxInt64, rng.Int64()}[rng.IntN(7)]
				n := []int64{l.Burst, l.Burst - 1, 0, -1, math.MinInt64, l.Burst + 1, rng.Int64N(l.Burst + 1)}[rng.IntN(7)]
				f := []int64{0, 1, int64(l.Period) - 1, int64(l.Period), -1, rng.Int64N(int64(l.Period))}[rng.IntN(6)]
				state = append(append(append([]byte{tokenbucket.Tag}, be(n)...), be(f)...), be(tt)...)
			}
			cost := []int64{1, 2, l.Burst, l.Burst - 1, rng.Int64N(l.Burst) + 1}[rng.IntN(5)]
			cost = min(max(cost, 1), l.Burst)
			got, gotState, err := alg.Decide(state, now, l, cost, nil)
			if err != nil {
				t.Fatal(err)
			}
			want, wantState, err := alg.Reserve(state, now, l, cost, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got != want || !bytes.Equal(gotState, wantState) {
				t.Fatalf("limit %v, state %x, now %d, cost %d:\nDecide  %+v %x\nReserve %+v %x", l, state, now, cost, got, gotState, want, wantState)
			}
		}
	}
}

func be(v int64) []byte { return arith.AppendInt64(nil, v) }
