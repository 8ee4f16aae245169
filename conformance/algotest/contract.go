package algotest

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
	"pgregory.net/rapid"
)

// fail is the failure reporter shared by rapid.T and testing.T.
type fail interface {
	Helper()
	Fatalf(format string, args ...any)
}

// checkOutcome checks the invariants every single outcome satisfies.
func checkOutcome(f fail, what string, state []byte, l ratelimit.Limit, cost int64, o ratelimit.Outcome, out []byte) {
	f.Helper()
	switch {
	case o.Remaining < 0 || o.Remaining > l.Burst:
		f.Fatalf("%s: Remaining %d outside 0..Burst %d", what, o.Remaining, l.Burst)
	case o.RetryAfter < 0 || o.ResetAfter < 0 || o.TTL < 0 || o.Delay < 0:
		f.Fatalf("%s: negative duration in %+v", what, o)
	case o.Delay != 0:
		f.Fatalf("%s: Decide reported Delay %s, want 0", what, o.Delay)
	case o.Allowed && o.RetryAfter != 0:
		f.Fatalf("%s: allowed with RetryAfter %s, want 0", what, o.RetryAfter)
	case o.Changed == bytes.Equal(state, out):
		f.Fatalf("%s: Changed = %t but state %x became %x", what, o.Changed, state, out)
	case cost == 0 && o.Changed:
		f.Fatalf("%s: a peek (cost 0) changed the state %x to %x", what, state, out)
	case cost > l.Burst && (o.Allowed || o.RetryAfter != ratelimit.Never || o.Changed):
		f.Fatalf("%s: cost %d above Burst %d gave %+v, want denied, RetryAfter Never, unchanged", what, cost, l.Burst, o)
	case !o.Allowed && o.Changed:
		f.Fatalf("%s: a denial changed the state %x to %x", what, state, out)
	case !o.Allowed && cost <= l.Burst && o.RetryAfter == 0:
		f.Fatalf("%s: denied with RetryAfter 0: waiting 0 cannot admit the same cost", what)
	}
}

// testContract checks every outcome of generated sequences, and that
// RetryAfter is exact for each denial.
func (s *suite) testContract(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		l := s.drawLimit(rt)
		var state []byte
		for i, st := range drawSteps(rt, l, true) {
			what := fmt.Sprintf("step %d (%s) under %s", i, st, l)
			o, out := s.decide(rt, state, st.now, l, st.cost)
			checkOutcome(rt, what, state, l, st.cost, o, out)
			o2, out2 := s.decide(rt, state, st.now, l, st.cost)
			if o2 != o || !bytes.Equal(out2, out) {
				rt.Fatalf("%s: not deterministic: %+v %x then %+v %x", what, o, out, o2, out2)
			}
			if !o.Allowed && o.RetryAfter != ratelimit.Never && st.now <= math.MaxInt64-int64(o.RetryAfter) {
				at := st.now + int64(o.RetryAfter)
				if late, _ := s.decide(rt, state, at, l, st.cost); !late.Allowed {
					rt.Fatalf("%s: denied with RetryAfter %s, but still denied after waiting it: %+v", what, o.RetryAfter, late)
				}
				if early, _ := s.decide(rt, state, at-1, l, st.cost); early.Allowed {
					rt.Fatalf("%s: denied with RetryAfter %s, but allowed 1ns earlier: RetryAfter is not the shortest wait", what, o.RetryAfter)
				}
			}
			state = out
		}
	})
}

// testClockBackwards checks that an earlier instant never reports more
// capacity than a later one for the same state, and that a clock swinging
// back and forth within a short span admits no more than the limit allows
// in that span.
func (s *suite) testClockBackwards(t *testing.T) {
	t.Run("Monotone", func(t *testing.T) {
		rapid.Check(t, func(rt *rapid.T) {
			l := s.drawLimit(rt)
			var state []byte
			steps := drawSteps(rt, l, true)
			for _, st := range steps {
				_, state = s.decide(rt, state, st.now, l, st.cost)
			}
			last := steps[len(steps)-1].now
			later := last + min(rapid.Int64Range(0, int64(l.Period)).Draw(rt, "later"), math.MaxInt64-last)
			earlier := last - rapid.Int64Range(1, 2*int64(l.Period)).Draw(rt, "earlier")
			cost := drawCost(rt, l)
			a, _ := s.decide(rt, state, earlier, l, cost)
			b, _ := s.decide(rt, state, later, l, cost)
			pa, _ := s.decide(rt, state, earlier, l, 0)
			pb, _ := s.decide(rt, state, later, l, 0)
			if pa.Remaining > pb.Remaining || (a.Allowed && !b.Allowed) {
				rt.Fatalf("under %s, state %x: at %d (earlier) cost %d gives %+v and a peek %+v; at %d (later) %+v and %+v: going back in time minted capacity", l, state, earlier, cost, a, pa, later, b, pb)
			}
		})
	})
	t.Run("Swinging", func(t *testing.T) {
		rapid.Check(t, func(rt *rapid.T) {
			l := s.drawLimit(rt)
			span := max(int64(l.Period)/2, 1)
			var state []byte
			var admitted int64
			n := rapid.IntRange(1, 60).Draw(rt, "calls")
			for range n {
				now := base + rapid.Int64Range(0, span).Draw(rt, "at")
				o, out := s.decide(rt, state, now, l, 1)
				if o.Allowed {
					admitted++
				}
				state = out
			}
			// A bucket admits Burst plus what refills in the span; a
			// window admits Burst in each of at most two windows.
			limit := 2*l.Burst + int64(ratelimit.MulDivCeil(l.Count, span, int64(l.Period)))
			if admitted > limit {
				rt.Fatalf("under %s, %d one-unit calls at instants swinging within %s admitted %d, more than %d", l, n, time.Duration(span), admitted, limit)
			}
		})
	})
}

// testTTL checks that a state decides like no state from TTL on, and that
// the key is fully available after ResetAfter.
func (s *suite) testTTL(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		l := s.drawLimit(rt)
		var state []byte
		var last ratelimit.Outcome
		steps := drawSteps(rt, l, false)
		for _, st := range steps {
			last, state = s.decide(rt, state, st.now, l, st.cost)
		}
		now := steps[len(steps)-1].now
		for _, d := range []int64{int64(last.TTL), int64(last.TTL) + 1, int64(last.TTL) + rapid.Int64Range(0, int64(l.Period)).Draw(rt, "after")} {
			if now > math.MaxInt64-d {
				continue
			}
			cost := drawCost(rt, l)
			got, _ := s.decide(rt, state, now+d, l, cost)
			want, _ := s.decide(rt, nil, now+d, l, cost)
			got.Changed, want.Changed = false, false
			if got != want {
				rt.Fatalf("under %s, state %x with TTL %s, cost %d at +%s: %+v, but no state gives %+v: the state cannot be dropped at its TTL", l, state, last.TTL, cost, time.Duration(d), got, want)
			}
		}
		if now <= math.MaxInt64-int64(last.ResetAfter) {
			at := now + int64(last.ResetAfter)
			got, _ := s.decide(rt, state, at, l, 0)
			fresh, _ := s.decide(rt, nil, at, l, 0)
			if got.Remaining != fresh.Remaining {
				rt.Fatalf("under %s, state %x with ResetAfter %s: Remaining %d after waiting it, want %d (fully available)", l, state, last.ResetAfter, got.Remaining, fresh.Remaining)
			}
		}
	})
}

// edgeLimits are the extreme valid limits.
var edgeLimits = []ratelimit.Limit{
	{Count: 1, Period: 1, Burst: 1},
	{Count: ratelimit.MaxCount, Period: 1, Burst: ratelimit.MaxCount},
	{Count: ratelimit.MaxCount, Period: ratelimit.MaxPeriod, Burst: ratelimit.MaxCount},
	{Count: 1, Period: ratelimit.MaxPeriod, Burst: 10},
	{Count: 1, Period: 1, Burst: ratelimit.MaxCount},
	{Count: ratelimit.MaxCount, Period: ratelimit.MaxPeriod, Burst: 1},
}

// edgeInstants are extreme instants, in the order they are visited: going
// forward to the end of time and then back to its start.
var edgeInstants = []int64{0, 1, base, 1 << 62, math.MaxInt64 - 1, math.MaxInt64, -1, math.MinInt64 + 1, math.MinInt64, base}

// testEdges drives every extreme limit through extreme instants and costs
// and checks every outcome, then checks that a key is fully available
// again after two centuries idle and at the last instant of time.
func (s *suite) testEdges(t *testing.T) {
	for _, l := range edgeLimits {
		t.Run(l.String(), func(t *testing.T) {
			costs := []int64{1, l.Burst, 0, l.Burst + 1, ratelimit.MaxCost, 1}
			var state []byte
			for i, now := range edgeInstants {
				for _, cost := range costs {
					what := fmt.Sprintf("cost %d at %d (instant %d) under %s", cost, now, i, l)
					o, out, err := s.safeDecide(t, state, now, l, cost)
					if err != nil {
						t.Fatalf("%s on state %x: %v", what, state, err)
					}
					checkOutcome(t, what, state, l, cost, o, out)
					state = out
				}
			}
			// Exhaust at base, then idle for two centuries.
			o, out, err := s.safeDecide(t, nil, base, l, l.Burst)
			if err != nil || !o.Allowed {
				t.Fatalf("taking the whole burst %d of a new key at %d: %+v, %v", l.Burst, base, o, err)
			}
			state = out
			for _, at := range []int64{base + 2*int64(ratelimit.MaxWindowSpan), math.MaxInt64} {
				p, _, err := s.safeDecide(t, state, at, l, 0)
				if err != nil || p.Remaining != l.Burst || !p.Allowed {
					t.Errorf("peek at %d after taking the whole burst at %d: %+v, %v; want the whole burst %d available", at, base, p, err, l.Burst)
				}
			}
		})
	}
}

// safeDecide calls Decide, turning a panic into a failure.
func (s *suite) safeDecide(t *testing.T, state []byte, now int64, l ratelimit.Limit, cost int64) (o ratelimit.Outcome, out []byte, err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("Decide(cost %d at %d under %s) on state %x panicked: %v", cost, now, l, state, p)
		}
	}()
	o, out, err = s.alg.Decide(bytes.Clone(state), now, l, cost, nil)
	return o, bytes.Clone(out), err
}

// testGarbage feeds random states and mutations of real states to Decide.
func (s *suite) testGarbage(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		l := s.drawLimit(rt)
		var state []byte
		if rapid.Bool().Draw(rt, "mutate") {
			for _, st := range drawSteps(rt, l, true) {
				_, state = s.decide(rt, state, st.now, l, st.cost)
			}
			state = mutate(rt, state)
		} else {
			state = rapid.SliceOfN(rapid.Byte(), 0, 64).Draw(rt, "garbage")
		}
		now := base + rapid.Int64Range(-int64(time.Hour), int64(time.Hour)).Draw(rt, "now")
		cost := drawCost(rt, l)
		var (
			o   ratelimit.Outcome
			out []byte
			err error
		)
		func() {
			defer func() {
				if p := recover(); p != nil {
					rt.Fatalf("Decide on garbage state %x panicked: %v", state, p)
				}
			}()
			o, out, err = s.alg.Decide(bytes.Clone(state), now, l, cost, nil)
		}()
		s.garbageCapabilities(rt, state, now, l, max(cost, 1))
		if err != nil {
			if !errors.Is(err, ratelimit.ErrCorruptState) {
				rt.Fatalf("Decide on garbage state %x: %v, want an error wrapping ErrCorruptState", state, err)
			}
			return
		}
		checkOutcome(rt, fmt.Sprintf("cost %d on garbage state %x under %s", cost, state, l), state, l, cost, o, out)
		if _, _, err := s.alg.Decide(out, now, l, 0, nil); err != nil {
			rt.Fatalf("the state %x written from garbage %x does not decode: %v", out, state, err)
		}
	})
}

// garbageCapabilities feeds a damaged state to every optional capability
// the algorithm has: each must return ErrCorruptState or an outcome
// without negative fields, never panic.
func (s *suite) garbageCapabilities(rt *rapid.T, state []byte, now int64, l ratelimit.Limit, amount int64) {
	rt.Helper()
	var calls []struct {
		name string
		fn   func() (ratelimit.Outcome, []byte, error)
	}
	add := func(name string, fn func() (ratelimit.Outcome, []byte, error)) {
		calls = append(calls, struct {
			name string
			fn   func() (ratelimit.Outcome, []byte, error)
		}{name, fn})
	}
	if r, ok := s.alg.(ratelimit.Reserver); ok {
		add("Reserve", func() (ratelimit.Outcome, []byte, error) {
			return r.Reserve(bytes.Clone(state), now, l, amount, l.Period, nil)
		})
	}
	if r, ok := s.alg.(ratelimit.Refunder); ok {
		add("Refund", func() (ratelimit.Outcome, []byte, error) { return r.Refund(bytes.Clone(state), now, l, amount, nil) })
	}
	if c, ok := s.alg.(ratelimit.Charger); ok {
		add("Charge", func() (ratelimit.Outcome, []byte, error) { return c.Charge(bytes.Clone(state), now, l, amount, nil) })
	}
	for _, call := range calls {
		var (
			o   ratelimit.Outcome
			err error
		)
		func() {
			defer func() {
				if p := recover(); p != nil {
					rt.Fatalf("%s on garbage state %x panicked: %v", call.name, state, p)
				}
			}()
			o, _, err = call.fn()
		}()
		switch {
		case err != nil && !errors.Is(err, ratelimit.ErrCorruptState):
			rt.Fatalf("%s on garbage state %x: %v, want an error wrapping ErrCorruptState", call.name, state, err)
		case err == nil && (o.Remaining < 0 || o.RetryAfter < 0 || o.ResetAfter < 0 || o.TTL < 0 || o.Delay < 0):
			rt.Fatalf("%s on garbage state %x: negative field in %+v", call.name, state, o)
		}
	}
}

// mutate damages a state: flips a bit, truncates, extends or changes a
// byte.
func mutate(rt *rapid.T, state []byte) []byte {
	state = bytes.Clone(state)
	switch rapid.IntRange(0, 3).Draw(rt, "mutation") {
	case 0:
		if len(state) > 0 {
			i := rapid.IntRange(0, len(state)-1).Draw(rt, "bit")
			state[i] ^= 1 << rapid.IntRange(0, 7).Draw(rt, "which")
		}
	case 1:
		if len(state) > 0 {
			state = state[:rapid.IntRange(0, len(state)-1).Draw(rt, "truncate")]
		}
	case 2:
		state = append(state, rapid.SliceOfN(rapid.Byte(), 1, 8).Draw(rt, "extend")...)
	default:
		if len(state) > 0 {
			state[rapid.IntRange(0, len(state)-1).Draw(rt, "byte")] = rapid.Byte().Draw(rt, "value")
		}
	}
	return state
}

// testAllocs checks that Decide on an existing state does not allocate
// when dst has room, whether it allows, denies or peeks.
func (s *suite) testAllocs(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("algotest: allocation counts are meaningless with coverage on")
	}
	l := ratelimit.Limit{Count: 10, Period: time.Second, Burst: 5}
	_, state, err := s.alg.Decide(nil, base, l, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	state = bytes.Clone(state)
	dst := make([]byte, 0, len(state)+256)
	for _, tc := range []struct {
		name string
		cost int64
	}{{"Allowed", 1}, {"Denied", 5}, {"Peek", 0}, {"OverBurst", 6}} {
		var err error
		allocs := testing.AllocsPerRun(100, func() {
			_, dst, err = s.alg.Decide(state, base, l, tc.cost, dst[:0])
		})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if allocs != 0 {
			t.Errorf("%s: Decide on an existing %d-byte state allocated %.1f times per call, want 0", tc.name, len(state), allocs)
		}
	}
}

// testConcurrent calls Decide from several goroutines on one input state;
// run with -race it finds shared mutable state, and every call must give
// the same answer.
func (s *suite) testConcurrent(t *testing.T) {
	l := ratelimit.Limit{Count: 10, Period: time.Second, Burst: 5}
	_, state, err := s.alg.Decide(nil, base, l, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, wantState, err := s.alg.Decide(state, base+1, l, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for range 8 {
		wg.Go(func() {
			dst := make([]byte, 0, 64)
			for range 200 {
				o, out, err := s.alg.Decide(state, base+1, l, 1, dst[:0])
				if err != nil || o != want || !bytes.Equal(out, wantState) {
					errs <- fmt.Sprintf("concurrent Decide gave %+v %x %v, want %+v %x", o, out, err, want, wantState)
					return
				}
				dst = out
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
