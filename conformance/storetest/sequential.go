package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/conformance/models"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/algtest"
)

// reference is the sequential meaning of one key: the algorithm applied
// through ratelimit.Evaluate to a state held in memory.
type reference struct {
	state []byte
}

// apply evaluates c at now and, when the algorithm reports a change,
// keeps the new state.
func (r *reference) apply(c ratelimit.Check, now int64) (ratelimit.Outcome, error) {
	o, next, err := ratelimit.Evaluate(c.Algorithm, c.Op, r.state, now, c.Limit, c.Cost, c.MaxWait, nil)
	if err == nil && o.Changed {
		r.state = append(r.state[:0], next...)
	}
	return o, err
}

// peek evaluates c at now without keeping anything.
func (r *reference) peek(c ratelimit.Check, now int64) (ratelimit.Outcome, error) {
	o, _, err := ratelimit.Evaluate(c.Algorithm, c.Op, r.state, now, c.Limit, c.Cost, c.MaxWait, nil)
	return o, err
}

// compare reports how got differs from want. With an injected clock every
// outcome field but Changed and TTL must match; without one, time is only
// known roughly, so only Allowed and Remaining are compared.
func (s *suite) compare(got, want ratelimit.Outcome) string {
	exact := s.h.Clock != nil
	switch {
	case got.Allowed != want.Allowed:
		return fmt.Sprintf("Allowed = %t, want %t", got.Allowed, want.Allowed)
	case got.Remaining != want.Remaining:
		return fmt.Sprintf("Remaining = %d, want %d", got.Remaining, want.Remaining)
	case exact && got.RetryAfter != want.RetryAfter:
		return fmt.Sprintf("RetryAfter = %s, want %s", got.RetryAfter, want.RetryAfter)
	case exact && got.ResetAfter != want.ResetAfter:
		return fmt.Sprintf("ResetAfter = %s, want %s", got.ResetAfter, want.ResetAfter)
	case exact && got.Delay != want.Delay:
		return fmt.Sprintf("Delay = %s, want %s", got.Delay, want.Delay)
	case !exact && (got.RetryAfter == ratelimit.Never) != (want.RetryAfter == ratelimit.Never):
		return fmt.Sprintf("RetryAfter = %s, want %s", got.RetryAfter, want.RetryAfter)
	case got.RetryAfter < 0 || got.ResetAfter < 0 || got.Delay < 0 || got.Remaining < 0:
		return fmt.Sprintf("negative field in %+v", got)
	}
	return ""
}

// sequenceLimits are the limits of the agreement check: with an injected
// clock they refill at very different rates; without one nothing refills
// during the test, so counts are exact whatever the server's clock says.
func (s *suite) sequenceLimits() []ratelimit.Limit {
	if s.h.Clock == nil {
		return []ratelimit.Limit{s.frozen(1), s.frozen(7), s.frozen(40)}
	}
	return []ratelimit.Limit{
		{Count: 10, Period: time.Second, Burst: 5},
		{Count: 3, Period: time.Minute, Burst: 7},
		{Count: 1000, Period: time.Millisecond, Burst: 1000},
		{Count: 7, Period: 3 * time.Second, Burst: 1},
		s.frozen(20),
	}
}

// testSequential checks that the store's outcomes equal the algorithm's
// own sequential result (the generic path) for a random sequence of every
// supported operation, spread over two clients of the same backend.
func (s *suite) testSequential(t *testing.T) {
	if s.h.Approximate != nil {
		t.Skip("storetest: approximate store: decisions are not compared one by one (Contention checks the bound)")
	}
	s.forEachAlg(t, func(t *testing.T, alg ratelimit.Algorithm) {
		for li, l := range s.sequenceLimits() {
			if !algtest.Accepts(alg, l) {
				continue // a window algorithm refuses a window that is not whole
			}
			t.Run(fmt.Sprintf("limit=%d", li), func(t *testing.T) {
				s.sequence(t, alg, l, 150)
			})
		}
		if m, ok := models.For(alg.Name()); ok {
			t.Run("Model", func(t *testing.T) {
				for _, l := range s.sequenceLimits() {
					if !algtest.Accepts(alg, l) {
						continue
					}
					s.modelSequence(t, alg, m, l, 100)
				}
			})
		}
	})
}

// modelSequence runs n random takes and peeks on one key and compares each
// outcome with the algorithm's independent reference model (package
// models), which describes takes only.
func (s *suite) modelSequence(t *testing.T, alg ratelimit.Algorithm, m models.Model, l ratelimit.Limit, n int) {
	r := s.rng()
	sts := s.stores(t, 2)
	s.startClock()
	c := ratelimit.Check{Namespace: "model", Key: newKey(t, r, "model"), Algorithm: alg, Limit: l}
	key := m.New(l)
	for i := range n {
		c.Cost = s.randomCost(r, l)
		s.advance(r, l)
		now := s.now()
		got, err := s.apply(t, sts[i%2], c)
		if err != nil {
			t.Fatalf("step %d: %s: %v", i, describe(c), err)
		}
		want := key.Decide(now, c.Cost)
		if d := s.compare(got, ratelimit.Outcome{Allowed: want.Allowed, Remaining: want.Remaining, RetryAfter: want.RetryAfter, ResetAfter: want.ResetAfter}); d != "" {
			t.Fatalf("step %d at +%s under %s: %s: store disagrees with the model of %s: %s\nstore: %+v\nmodel: %+v", i, time.Duration(now-base), l, describe(c), m.Algorithm(), d, got, want)
		}
	}
}

// sequence runs n random operations on one key and compares each outcome
// with the reference.
func (s *suite) sequence(t *testing.T, alg ratelimit.Algorithm, l ratelimit.Limit, n int) {
	r := s.rng()
	sts := s.stores(t, 2)
	s.startClock()
	ns := fmt.Sprintf("ns%x", r.Uint32())
	c := ratelimit.Check{Namespace: ns, Key: newKey(t, r, "seq"), Algorithm: alg, Limit: l}
	var ref reference
	var history []string
	for i := range n {
		c.Op, c.MaxWait = ratelimit.OpTake, 0
		c.Cost = s.randomCost(r, l)
		switch r.IntN(20) {
		case 0:
			ctx, cancel := s.opContext(t)
			err := sts[i%2].Reset(ctx, ns, c.Key)
			cancel()
			if err != nil {
				t.Fatalf("step %d: Reset: %v", i, err)
			}
			ref.state = nil
			history = append(history, "reset")
			continue
		case 1:
			c.Op = ratelimit.OpReserve
			c.MaxWait = s.randomWait(r, l)
		case 2:
			c.Op = ratelimit.OpRefund
		case 3:
			c.Op = ratelimit.OpCharge
		}
		if c.Op != ratelimit.OpTake && c.Cost == 0 {
			c.Cost = 1
		}
		s.advance(r, l)
		now := s.now()
		want, werr := ref.apply(c, now)
		got, err := s.apply(t, sts[i%2], c)
		history = append(history, fmt.Sprintf("%s at +%s", describe(c), time.Duration(now-base)))
		switch {
		case werr != nil && err == nil:
			t.Fatalf("step %d: %s: store returned %+v, the algorithm says error %v\nlast steps:\n%s", i, describe(c), got, werr, tail(history))
		case werr != nil:
			if errors.Is(werr, ratelimit.ErrUnsupported) && !errors.Is(err, ratelimit.ErrUnsupported) {
				t.Fatalf("step %d: %s: error %v does not wrap ErrUnsupported", i, describe(c), err)
			}
			continue
		case err != nil:
			t.Fatalf("step %d: %s: unexpected error %v", i, describe(c), err)
		}
		if d := s.compare(got, want); d != "" {
			t.Fatalf("step %d at now=%d: %s: %s\nstore:     %+v\nalgorithm: %+v\nlast steps:\n%s", i, now, describe(c), d, got, want, tail(history))
		}
	}
}

// randomCost picks mostly small costs, some peeks, the whole burst and
// more than the burst.
func (s *suite) randomCost(r *rand.Rand, l ratelimit.Limit) int64 {
	switch r.IntN(10) {
	case 0:
		return 0
	case 1:
		return l.Burst
	case 2:
		return l.Burst + 1 + r.Int64N(3)
	default:
		return 1 + r.Int64N(min(l.Burst, 3))
	}
}

// randomWait picks a reservation bound: none, about one refill interval,
// or a very long one. Without a clock the bounds stay far from the
// multiples of the refill interval, so a few milliseconds of clock skew
// cannot change a decision.
func (s *suite) randomWait(r *rand.Rand, l ratelimit.Limit) time.Duration {
	interval := l.Period / time.Duration(l.Count)
	switch r.IntN(3) {
	case 0:
		return 0
	case 1:
		return interval + interval/2
	default:
		return 100 * interval
	}
}

// advance moves an injected clock by a random step: nothing, a little, about
// one refill interval, a long idle gap, or, rarely, backwards.
func (s *suite) advance(r *rand.Rand, l ratelimit.Limit) {
	if s.h.Clock == nil {
		return
	}
	interval := int64(l.Period) / l.Count
	switch r.IntN(8) {
	case 0, 1, 2:
	case 3, 4:
		s.h.Clock.Advance(time.Duration(r.Int64N(max(interval, 1)) + 1))
	case 5:
		s.h.Clock.Advance(time.Duration(interval * (1 + r.Int64N(3))))
	case 6:
		s.h.Clock.Advance(time.Duration(r.Int64N(int64(l.Period)*3) + 1))
	case 7:
		if r.IntN(4) == 0 {
			s.h.Clock.Advance(-time.Duration(r.Int64N(int64(l.Period)) + 1))
		} else {
			s.h.Clock.Advance(365 * 24 * time.Hour)
		}
	}
}

// tail renders the last steps of a sequence for a failure message.
func tail(history []string) string {
	const n = 12
	if len(history) > n {
		history = history[len(history)-n:]
	}
	return "  " + strings.Join(history, "\n  ")
}
