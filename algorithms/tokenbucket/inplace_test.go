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

// TestPrepareTakeMatchesDecide checks the in-place take of PrepareTake
// against Decide: the same outcome and error, the new state written in
// place when Changed and the state untouched otherwise.
func TestPrepareTakeMatchesDecide(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	limits := []ratelimit.Limit{
		{Count: 1, Period: 1, Burst: 1},
		{Count: 3, Period: time.Second, Burst: 3},
		{Count: 1_000_000_000, Period: time.Second, Burst: 1_000_000_000},
		{Count: 7, Period: 1000 * time.Hour, Burst: 5},
	}
	alg := tokenbucket.New()
	for _, l := range limits {
		take, maxState := alg.PrepareTake(l)
		if maxState != tokenbucket.StateLen {
			t.Fatalf("maxState %d, want %d", maxState, tokenbucket.StateLen)
		}
		now := int64(1_700_000_000_000_000_000)
		var state []byte
		for range 3000 {
			switch rng.IntN(10) {
			case 0:
				now = []int64{0, math.MaxInt64, arith.MinNow, rng.Int64()}[rng.IntN(4)]
			case 1:
				state = []byte{tokenbucket.Tag, 1} // corrupt
			default:
				now += rng.Int64N(int64(l.Period)/l.Count + 2)
			}
			cost := []int64{0, 1, 1, 2, l.Burst, l.Burst + 1}[rng.IntN(6)]
			want, wantState, wantErr := alg.Decide(state, now, l, cost, nil)
			inPlace := append(make([]byte, 0, 31), state...)
			var got ratelimit.Outcome
			n, err := take(inPlace, now, cost, &got)
			if (err == nil) != (wantErr == nil) {
				t.Fatalf("limit %v, state %x, now %d, cost %d: error %v, Decide's %v", l, state, now, cost, err, wantErr)
			}
			if err != nil {
				state = nil
				continue
			}
			gotState := inPlace[:n]
			if !got.Changed {
				gotState = inPlace
			}
			if got != want || !bytes.Equal(gotState, wantState) {
				t.Fatalf("limit %v, state %x, now %d, cost %d:\ntake   %+v %x\nDecide %+v %x", l, state, now, cost, got, gotState, want, wantState)
			}
			state = wantState
		}
	}
}
