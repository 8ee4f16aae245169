package algotest

import (
	"bytes"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
	"pgregory.net/rapid"
)

// testCapabilities checks the optional capabilities the algorithm
// implements, on states reached by generated sequences: Reserve honours
// maxWait and changes nothing when it refuses; Refund never lowers
// availability nor raises it above a new key's; Charge never fails and
// never raises availability.
func (s *suite) testCapabilities(t *testing.T) {
	reserver, canReserve := s.alg.(ratelimit.Reserver)
	refunder, canRefund := s.alg.(ratelimit.Refunder)
	charger, canCharge := s.alg.(ratelimit.Charger)
	if !canReserve && !canRefund && !canCharge {
		t.Skip("algotest: the algorithm implements no optional capability")
	}
	// reach returns a state after a generated sequence of takes and the
	// instant of the last one.
	reach := func(rt *rapid.T, l ratelimit.Limit) ([]byte, int64) {
		var state []byte
		steps := drawSteps(rt, l, false)
		for _, st := range steps {
			_, state = s.decide(rt, state, st.now, l, st.cost)
		}
		return state, steps[len(steps)-1].now
	}
	// peek returns the units available on state at now.
	peek := func(rt *rapid.T, state []byte, now int64, l ratelimit.Limit) int64 {
		o, _ := s.decide(rt, state, now, l, 0)
		return o.Remaining
	}
	if canReserve {
		t.Run("Reserve", func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				l := s.drawLimit(rt)
				state, now := reach(rt, l)
				cost := drawCost(rt, l)
				if cost == 0 {
					cost = 1
				}
				maxWait := time.Duration(rapid.Int64Range(0, 3*int64(l.Period)).Draw(rt, "maxWait"))
				in := bytes.Clone(state)
				o, out, err := reserver.Reserve(in, now, l, cost, maxWait, nil)
				what := fmt.Sprintf("Reserve(cost %d, maxWait %s) at %d under %s on state %x", cost, maxWait, now, l, state)
				switch {
				case err != nil:
					rt.Fatalf("%s: %v", what, err)
				case !bytes.Equal(in, state):
					rt.Fatalf("%s modified its input", what)
				case o.Delay < 0 || o.RetryAfter < 0 || o.Remaining < 0:
					rt.Fatalf("%s: negative field in %+v", what, o)
				case cost > l.Burst && (o.Allowed || o.RetryAfter != ratelimit.Never || o.Changed):
					rt.Fatalf("%s: cost above Burst gave %+v, want denied with RetryAfter Never, unchanged", what, o)
				case o.Allowed && o.Delay > maxWait:
					rt.Fatalf("%s: allowed with Delay %s beyond maxWait", what, o.Delay)
				case o.Allowed && !o.Changed:
					rt.Fatalf("%s: allowed without changing the state", what)
				case !o.Allowed && (o.Changed || !bytes.Equal(out, state)):
					rt.Fatalf("%s: refused but changed the state to %x", what, out)
				case !o.Allowed && cost <= l.Burst && o.RetryAfter <= maxWait && representable(now, maxWait, l):
					rt.Fatalf("%s: refused with RetryAfter %s within maxWait: it should have reserved", what, o.RetryAfter)
				}
			})
		})
	}
	if canRefund {
		t.Run("Refund", func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				l := s.drawLimit(rt)
				state, now := reach(rt, l)
				amount := rapid.Int64Range(1, l.Burst+2).Draw(rt, "amount")
				o, out, err := refunder.Refund(bytes.Clone(state), now, l, amount, nil)
				if err != nil {
					rt.Fatalf("Refund(%d) at %d under %s on state %x: %v", amount, now, l, state, err)
				}
				before, after := peek(rt, state, now, l), peek(rt, out, now, l)
				fresh := peek(rt, nil, now, l)
				if after < before || after > fresh || o.Remaining < 0 {
					rt.Fatalf("Refund(%d) under %s: availability %d became %d (a new key has %d): a refund must not lower it nor raise it above a new key's", amount, l, before, after, fresh)
				}
			})
		})
	}
	if canCharge {
		t.Run("Charge", func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				l := s.drawLimit(rt)
				state, now := reach(rt, l)
				amount := rapid.Int64Range(1, 3*l.Burst).Draw(rt, "amount")
				o, out, err := charger.Charge(bytes.Clone(state), now, l, amount, nil)
				if err != nil {
					rt.Fatalf("Charge(%d) at %d under %s on state %x: %v", amount, now, l, state, err)
				}
				before, after := peek(rt, state, now, l), peek(rt, out, now, l)
				if after > before || o.Remaining < 0 || o.RetryAfter < 0 {
					rt.Fatalf("Charge(%d) under %s: availability %d became %d (%+v): a charge must not raise it", amount, l, before, after, o)
				}
				if before > 0 && after == before && amount <= before {
					rt.Fatalf("Charge(%d) under %s with %d available changed nothing", amount, l, before)
				}
			})
		})
	}
}

// representable reports whether a reservation made at now, waiting up to
// maxWait, ends at an instant a state can record: now + maxWait + the
// time to refill the burst must fit in int64. Near the end of time an
// algorithm may refuse a reservation it cannot record.
func representable(now int64, maxWait time.Duration, l ratelimit.Limit) bool {
	span := int64(maxWait) + int64(l.FillTime())
	return span >= 0 && now <= math.MaxInt64-span
}
