package gcra_test

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/arith"
)

// TestDecideFastPathMatchesReserve checks Decide, which computes an
// admitting outcome inline and, from the full bucket, without outcome's
// divisions, against Reserve with maxWait 0, which goes through commit:
// for 1 <= cost <= Burst both must give the same outcome and state, from
// random and edge states.
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
	alg := gcra.New()
	for _, l := range limits {
		tau := arith.MulDivCeil(l.Burst, int64(l.Period), l.Count)
		for range 300 {
			now := []int64{0, 1, math.MaxInt64, math.MinInt64, arith.MinNow, rng.Int64()}[rng.IntN(6)]
			var state []byte
			if rng.IntN(4) > 0 {
				// S around now−τ (just full or just not), in debt, or anywhere.
				s := []int64{now - int64(tau), now - int64(tau) + 1, now - int64(tau) - 1, now, now + 1, math.MaxInt64, rng.Int64()}[rng.IntN(7)]
				f := []int64{0, 1, l.Count - 1, l.Count, -1, rng.Int64N(l.Count)}[rng.IntN(6)]
				state = append(append([]byte{gcra.Tag}, be(s)...), be(f)...)
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

// TestPrepareTakeMatchesDecide checks the in-place take of PrepareTake,
// which derives the limit's constants once, against Decide: the same
// outcome, the same error, the new state written in place when Changed
// and the state untouched otherwise, from random, edge and corrupt states
// and for every kind of cost.
func TestPrepareTakeMatchesDecide(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	limits := []ratelimit.Limit{
		{Count: 1, Period: 1, Burst: 1},
		{Count: 3, Period: time.Second, Burst: 4},
		{Count: 1_000_000_000, Period: time.Second, Burst: 1_000_000_000},
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
	alg := gcra.New()
	for _, l := range limits {
		take, maxState := alg.PrepareTake(l)
		if maxState != gcra.StateLen {
			t.Fatalf("maxState %d, want %d", maxState, gcra.StateLen)
		}
		tau := arith.MulDivCeil(l.Burst, int64(l.Period), l.Count)
		for range 300 {
			now := []int64{0, 1, math.MaxInt64, math.MinInt64, arith.MinNow, rng.Int64()}[rng.IntN(6)]
			var state []byte
			switch rng.IntN(8) {
			case 0:
			case 1:
				state = []byte{gcra.Tag, 1, 2} // corrupt
			default:
				s := []int64{now - int64(tau), now - int64(tau) + 1, now - int64(tau) - 1, now, now + 1, math.MaxInt64, rng.Int64()}[rng.IntN(7)]
				f := []int64{0, 1, l.Count - 1, l.Count, -1, rng.Int64N(l.Count)}[rng.IntN(6)]
				state = append(append([]byte{gcra.Tag}, be(s)...), be(f)...)
			}
			cost := []int64{0, 1, 2, l.Burst, l.Burst + 1, rng.Int64N(l.Burst) + 1}[rng.IntN(6)]
			want, wantState, wantErr := alg.Decide(state, now, l, cost, nil)
			inPlace := append(make([]byte, 0, 31), state...)
			var got ratelimit.Outcome
			n, err := take(inPlace, now, cost, &got)
			if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
				t.Fatalf("limit %v, state %x, now %d, cost %d: error %v, Decide's %v", l, state, now, cost, err, wantErr)
			}
			if err != nil {
				continue
			}
			gotState := inPlace[:n]
			if !got.Changed {
				gotState = inPlace
			}
			if got != want || !bytes.Equal(gotState, wantState) || (!got.Changed && !bytes.Equal(inPlace, state)) {
				t.Fatalf("limit %v, state %x, now %d, cost %d:\ntake   %+v %x\nDecide %+v %x", l, state, now, cost, got, gotState, want, wantState)
			}
		}
	}
}
