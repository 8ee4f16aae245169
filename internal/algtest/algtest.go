package algtest

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/model"
)

// Model is a reference model: Apply runs one operation and returns the
// outcome the algorithm must report.
type Model interface {
	Apply(op model.Op) ratelimit.Outcome
}

// Limits returns a fixed set of valid limits covering small odd rates,
// periods of 1 ns, rates above one per nanosecond and ten-year periods.
func Limits() []ratelimit.Limit {
	ls := []ratelimit.Limit{
		{Count: 1, Period: time.Second, Burst: 1},
		{Count: 3, Period: time.Second, Burst: 5},
		{Count: 7, Period: 10 * time.Millisecond, Burst: 3},
		{Count: 2, Period: 7, Burst: 4},
		{Count: 5, Period: 1, Burst: 9},
		{Count: 1_000_000_000_000, Period: time.Second, Burst: 1_000_000},
		{Count: 1, Period: ratelimit.MaxPeriod, Burst: 10},
		{Count: 1 << 40, Period: ratelimit.MaxPeriod, Burst: 1 << 40},
		{Count: 10, Period: time.Minute, Burst: 10},
	}
	for _, l := range ls {
		if err := l.Validate(); err != nil {
			panic(err)
		}
	}
	return ls
}

// Ops generates n random operations of the given kinds for l starting at
// start. Steps are mostly short relative to the refill of one unit and the
// Period; with backwards, one step in eight goes back in time.
func Ops(rng *rand.Rand, l ratelimit.Limit, start int64, n int, kinds []ratelimit.Op, backwards bool) []model.Op {
	// Steps are capped at 2^55 ns (about a year) so sequences stay far
	// from the int64 limits; Edges covers those.
	unit := min(max(int64(l.Period)/l.Count, 1), 1<<55)
	ops := make([]model.Op, 0, n)
	now := start
	for range n {
		var step int64
		switch rng.IntN(6) {
		case 0:
			step = 0
		case 1:
			step = 1
		case 2:
			step = rng.Int64N(2*unit + 1)
		case 3:
			step = rng.Int64N(min(int64(l.Period), 1<<55) + 1)
		case 4:
			step = rng.Int64N(unit*min(l.Burst, 64) + 1)
		default:
			step = rng.Int64N(unit/4 + 1)
		}
		if backwards && rng.IntN(8) == 0 {
			step = -rng.Int64N(2*unit + 1)
		}
		now += step
		cost := rng.Int64N(min(l.Burst, 8) + 1)
		switch rng.IntN(10) {
		case 0:
			cost = l.Burst
		case 1:
			cost = l.Burst + 1 + rng.Int64N(3)
		}
		op := model.Op{Now: now, Kind: kinds[rng.IntN(len(kinds))], Cost: min(cost, ratelimit.MaxCost)}
		if op.Kind == ratelimit.OpReserve {
			op.MaxWait = time.Duration(rng.Int64N(4 * unit))
		}
		ops = append(ops, op)
	}
	return ops
}

// Apply runs op on alg with state and returns the outcome and new state.
func Apply(alg ratelimit.Algorithm, state []byte, l ratelimit.Limit, op model.Op) (ratelimit.Outcome, []byte, error) {
	return ratelimit.Evaluate(alg, op.Kind, state, op.Now, l, op.Cost, op.MaxWait, nil)
}

// CompareModel runs random sequences on alg and on a fresh model per limit
// and fails on the first outcome that differs.
func CompareModel(t *testing.T, alg ratelimit.Algorithm, newModel func(ratelimit.Limit) Model, kinds []ratelimit.Op, backwards bool, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	for _, l := range Limits() {
		for seq := range 20 {
			m := newModel(l)
			var state []byte
			start := int64(1_700_000_000_000_000_000) + rng.Int64N(int64(time.Hour))
			for i, op := range Ops(rng, l, start, 60, kinds, backwards) {
				want := m.Apply(op)
				got, next, err := Apply(alg, state, l, op)
				if err != nil {
					t.Fatalf("%s seq %d step %d %+v: %v", l, seq, i, op, err)
				}
				if got != want {
					t.Fatalf("%s seq %d step %d %+v:\n got %+v\nwant %+v", l, seq, i, op, got, want)
				}
				if !got.Changed && !slices.Equal(next, state) {
					t.Fatalf("%s seq %d step %d: Changed false but state %x became %x", l, seq, i, state, next)
				}
				state = next
			}
		}
	}
}

// Differential runs the same random sequences on a and b and fails on the
// first outcome that differs in anything but TTL.
func Differential(t *testing.T, a, b ratelimit.Algorithm, kinds []ratelimit.Op, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 2))
	for _, l := range Limits() {
		for seq := range 20 {
			var sa, sb []byte
			for i, op := range Ops(rng, l, 1_000_000_000, 80, kinds, false) {
				oa, na, err := Apply(a, sa, l, op)
				if err != nil {
					t.Fatal(err)
				}
				ob, nb, err := Apply(b, sb, l, op)
				if err != nil {
					t.Fatal(err)
				}
				oa.TTL, ob.TTL = 0, 0
				if oa != ob {
					t.Fatalf("%s seq %d step %d %+v:\n%s %+v\n%s %+v", l, seq, i, op, a.Name(), oa, b.Name(), ob)
				}
				sa, sb = na, nb
			}
		}
	}
}

// Rules checks the rules of ratelimit.Algorithm.Decide on alg for every
// limit of Limits, from random reachable states.
func Rules(t *testing.T, alg ratelimit.Algorithm, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 3))
	kinds := []ratelimit.Op{ratelimit.OpTake}
	for _, l := range Limits() {
		for seq := range 10 {
			var state []byte
			start := int64(1_700_000_000_000_000_000)
			for i, op := range Ops(rng, l, start, 40, kinds, true) {
				checkStep(t, alg, l, state, op.Now, fmtCtx(l, seq, i))
				_, next, err := Apply(alg, state, l, op)
				if err != nil {
					t.Fatalf("%s: %v", fmtCtx(l, seq, i), err)
				}
				state = next
			}
		}
	}
}

func fmtCtx(l ratelimit.Limit, seq, i int) string {
	return fmt.Sprintf("%s seq %d step %d", l, seq, i)
}

// checkStep checks every rule that can be checked from one state at now.
func checkStep(t *testing.T, alg ratelimit.Algorithm, l ratelimit.Limit, state []byte, now int64, ctx string) {
	t.Helper()
	decide := func(s []byte, at int64, cost int64) (ratelimit.Outcome, []byte) {
		t.Helper()
		o, next, err := alg.Decide(s, at, l, cost, nil)
		if err != nil {
			t.Fatalf("%s: Decide(cost %d at %d): %v", ctx, cost, at, err)
		}
		CheckOutcome(t, fmt.Sprintf("%s: cost %d at %d", ctx, cost, at), s, l, cost, o, next)
		return o, next
	}
	// Cost 0 peeks and changes nothing.
	peek, next := decide(state, now, 0)
	if peek.Changed || !slices.Equal(next, state) {
		t.Fatalf("%s: peek changed the state", ctx)
	}
	// Cost above Burst: Never, nothing changes.
	if o, next := decide(state, now, l.Burst+1); o.Allowed || o.RetryAfter != ratelimit.Never || o.Changed || !slices.Equal(next, state) {
		t.Fatalf("%s: cost above burst gave %+v", ctx, o)
	}
	for _, cost := range []int64{1, max(1, l.Burst/2), l.Burst} {
		o, next := decide(state, now, cost)
		if cost == 1 && o.Allowed != peek.Allowed {
			t.Fatalf("%s: peek says %v, cost 1 says %v", ctx, peek.Allowed, o.Allowed)
		}
		if !o.Allowed {
			if o.Changed || !slices.Equal(next, state) {
				t.Fatalf("%s: denial changed the state", ctx)
			}
			// Never early: after RetryAfter the same cost passes.
			if later, _ := decide(state, now+int64(o.RetryAfter), cost); !later.Allowed {
				t.Fatalf("%s: cost %d denied with RetryAfter %s, still denied then: %+v", ctx, cost, o.RetryAfter, later)
			}
			continue
		}
		if o.RetryAfter != 0 {
			t.Fatalf("%s: allowed with RetryAfter %s", ctx, o.RetryAfter)
		}
		// After TTL the state is the initial one.
		if len(next) > 0 && o.TTL == 0 {
			t.Fatalf("%s: non-empty state %x with TTL 0", ctx, next)
		}
		if now > math.MaxInt64-int64(max(o.TTL, o.ResetAfter)) {
			continue // the state outlives the last instant of time
		}
		at := now + int64(o.TTL)
		fresh, _ := decide(nil, at, l.Burst)
		kept, _ := decide(next, at, l.Burst)
		kept.Changed, fresh.Changed = false, false
		kept.TTL, fresh.TTL = 0, 0
		if kept != fresh {
			t.Fatalf("%s: state %x after TTL %s differs from the initial state:\n got %+v\nwant %+v", ctx, next, o.TTL, kept, fresh)
		}
		// ResetAfter: all of Burst is available then.
		if full, _ := decide(next, now+int64(o.ResetAfter), l.Burst); !full.Allowed {
			t.Fatalf("%s: Burst not available after ResetAfter %s", ctx, o.ResetAfter)
		}
		// The clock going backwards never mints capacity.
		for _, back := range []int64{1, int64(l.Period), 1 << 40} {
			if b, _ := decide(next, now-back, 0); b.Remaining > o.Remaining {
				t.Fatalf("%s: %d ns earlier, Remaining %d > %d", ctx, back, b.Remaining, o.Remaining)
			}
		}
	}
}

// Garbage feeds every length 0..64 of random bytes, with and without the
// algorithm's tag as first byte, to Decide and to every capability: it must
// never panic, and must either fail with ErrCorruptState or give a sane
// outcome.
func Garbage(t *testing.T, alg ratelimit.Algorithm, tag byte, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 4))
	buf := make([]byte, 64)
	for n := range 65 {
		for trial := range 40 {
			for i := range buf[:n] {
				buf[i] = byte(rng.Uint32())
			}
			if n > 0 && trial%2 == 0 {
				buf[0] = tag
			}
			if trial%5 == 1 {
				for i := 1; i < n; i++ {
					buf[i] = []byte{0, 0xff, 0x7f, 0x80}[rng.IntN(4)]
				}
			}
			state := buf[:n]
			for _, l := range Limits()[:6] {
				now := []int64{0, math.MaxInt64, math.MinInt64, 1_700_000_000_000_000_000}[trial%4]
				for _, op := range []ratelimit.Op{ratelimit.OpTake, ratelimit.OpReserve, ratelimit.OpRefund, ratelimit.OpCharge} {
					o, _, err := ratelimit.Evaluate(alg, op, state, now, l, 1, time.Second, nil)
					if errors.Is(err, ratelimit.ErrUnsupported) {
						continue
					}
					if err != nil {
						if !errors.Is(err, ratelimit.ErrCorruptState) {
							t.Fatalf("state %x: error %v does not wrap ErrCorruptState", state, err)
						}
						continue
					}
					if o.Remaining < 0 || o.RetryAfter < 0 || o.ResetAfter < 0 || o.TTL < 0 || o.Delay < 0 {
						t.Fatalf("state %x op %s: insane outcome %+v", state, op, o)
					}
				}
			}
		}
	}
}
