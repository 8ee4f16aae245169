package algotest

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/algtest"
	"github.com/sluicehq/sluice/internal/arith"
	"pgregory.net/rapid"
)

// testContract checks every outcome of generated sequences, and that
// RetryAfter is exact for each denial.
func (s *suite) testContract(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		l := s.drawLimit(rt)
		var state []byte
		for i, st := range drawSteps(rt, l, true) {
			what := fmt.Sprintf("step %d (%s) under %s", i, st, l)
			o, out := s.decide(rt, state, st.now, l, st.cost)
			algtest.CheckOutcome(rt, what, state, l, st.cost, o, out)
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
			limit := 2*l.Burst + int64(arith.MulDivCeil(l.Count, span, int64(l.Period)))
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
		algtest.CheckOutcome(rt, fmt.Sprintf("cost %d on garbage state %x under %s", cost, state, l), state, l, cost, o, out)
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
