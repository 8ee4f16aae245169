package storetest

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// testBadInput checks that every invalid check is refused with the right
// typed error, on its own and inside a composite, without panicking and
// without changing any state.
func (s *suite) testBadInput(t *testing.T) {
	r := s.rng()
	s.startClock()
	alg := s.h.Algorithms[0]
	st := s.stores(t, 1)[0]
	good := ratelimit.Check{Namespace: "bad", Key: newKey(t, r, "target"), Algorithm: alg, Limit: s.frozen(5), Cost: 1}
	s.take(t, st, good)

	mutate := func(f func(*ratelimit.Check)) ratelimit.Check {
		c := good
		f(&c)
		return c
	}
	limit := func(count int64, period time.Duration, burst int64) func(*ratelimit.Check) {
		return func(c *ratelimit.Check) { c.Limit = ratelimit.Limit{Count: count, Period: period, Burst: burst} }
	}
	cases := []struct {
		name  string
		check ratelimit.Check
		want  error
	}{
		{"NilAlgorithm", mutate(func(c *ratelimit.Check) { c.Algorithm = nil }), ratelimit.ErrInvalidRule},
		{"ZeroLimit", mutate(limit(0, 0, 0)), ratelimit.ErrInvalidLimit},
		{"ZeroCount", mutate(limit(0, time.Second, 5)), ratelimit.ErrInvalidLimit},
		{"NegativeCount", mutate(limit(-1, time.Second, 5)), ratelimit.ErrInvalidLimit},
		{"MinInt64Count", mutate(limit(math.MinInt64, time.Second, 5)), ratelimit.ErrInvalidLimit},
		{"CountOverMax", mutate(limit(ratelimit.MaxCount+1, time.Second, 5)), ratelimit.ErrInvalidLimit},
		{"ZeroPeriod", mutate(limit(5, 0, 5)), ratelimit.ErrInvalidLimit},
		{"NegativePeriod", mutate(limit(5, -time.Nanosecond, 5)), ratelimit.ErrInvalidLimit},
		{"MinInt64Period", mutate(limit(5, math.MinInt64, 5)), ratelimit.ErrInvalidLimit},
		{"PeriodOverMax", mutate(limit(5, ratelimit.MaxPeriod+1, 5)), ratelimit.ErrInvalidLimit},
		{"ZeroBurst", mutate(limit(5, time.Second, 0)), ratelimit.ErrInvalidLimit},
		{"NegativeBurst", mutate(limit(5, time.Second, -5)), ratelimit.ErrInvalidLimit},
		{"BurstOverMax", mutate(limit(5, time.Second, ratelimit.MaxCount+1)), ratelimit.ErrInvalidLimit},
		{"MaxInt64Burst", mutate(limit(5, time.Second, math.MaxInt64)), ratelimit.ErrInvalidLimit},
		{"FillTimeOverflow", mutate(limit(1, ratelimit.MaxPeriod, ratelimit.MaxCount)), ratelimit.ErrInvalidLimit},
		// The user package answers an unlimited rule itself; a store
		// never decides it, so it refuses it like any limit out of range.
		{"Unlimited", mutate(func(c *ratelimit.Check) { c.Limit = ratelimit.Unlimited() }), ratelimit.ErrInvalidLimit},
		{"NegativeCost", mutate(func(c *ratelimit.Check) { c.Cost = -1 }), ratelimit.ErrInvalidCost},
		{"MinInt64Cost", mutate(func(c *ratelimit.Check) { c.Cost = math.MinInt64 }), ratelimit.ErrInvalidCost},
		{"CostOverMax", mutate(func(c *ratelimit.Check) { c.Cost = ratelimit.MaxCost + 1 }), ratelimit.ErrInvalidCost},
		{"MaxInt64Cost", mutate(func(c *ratelimit.Check) { c.Cost = math.MaxInt64 }), ratelimit.ErrInvalidCost},
		{"NegativeMaxWait", mutate(func(c *ratelimit.Check) { c.Op, c.MaxWait = ratelimit.OpReserve, -time.Nanosecond }), ratelimit.ErrInvalidCost},
		{"UnknownOp", mutate(func(c *ratelimit.Check) { c.Op = 200 }), ratelimit.ErrInvalidRule},
		{"EmptyKey", mutate(func(c *ratelimit.Check) { c.Key = "" }), ratelimit.ErrInvalidKey},
		{"KeyOverMax", mutate(func(c *ratelimit.Check) { c.Key += strings.Repeat("k", ratelimit.MaxKeyLen) }), ratelimit.ErrInvalidKey},
		{"Key1MB", mutate(func(c *ratelimit.Check) { c.Key += strings.Repeat("\x00k", 1<<19) }), ratelimit.ErrInvalidKey},
		{"NamespaceOverMax", mutate(func(c *ratelimit.Check) { c.Namespace = strings.Repeat("n", ratelimit.MaxKeyLen+1) }), ratelimit.ErrInvalidKey},
	}
	// unchanged checks that the target key still has want units, which
	// each subtest reads first so that one failure does not cascade.
	unchanged := func(t *testing.T, want int64, what string) {
		t.Helper()
		if got := s.remaining(t, st, good); got != want {
			t.Errorf("Remaining = %d after %s, want %d: bad input changed state", got, what, want)
		}
	}
	// invalid reports how err fails to be the typed refusal want, which
	// like every invalid-input error also matches ratelimit.ErrInvalid.
	invalid := func(err, want error) string {
		switch {
		case !errors.Is(err, want):
			return fmt.Sprintf("error %v, want %v", err, want)
		case !errors.Is(err, ratelimit.ErrInvalid):
			return fmt.Sprintf("error %v matches %v but not ratelimit.ErrInvalid", err, want)
		}
		return ""
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := s.remaining(t, st, good)
			_, err := s.apply(t, st, tc.check)
			if d := invalid(err, tc.want); d != "" {
				t.Errorf("Apply(%s): %s", describe(tc.check), d)
			}
			unchanged(t, want, "Apply")
			for _, checks := range [][]ratelimit.Check{{good, tc.check}, {tc.check, good}} {
				_, _, err := s.applyAll(t, st, checks)
				if d := invalid(err, tc.want); d != "" {
					t.Errorf("ApplyAll with a valid and an invalid check: %s", d)
				}
				unchanged(t, want, "a composite with one invalid check")
			}
		})
	}
	t.Run("CostOverBurst", func(t *testing.T) {
		want := s.remaining(t, st, good)
		c := good
		c.Cost = c.Limit.Burst + 1
		o := s.mustApply(t, st, c)
		if o.Allowed || o.RetryAfter != ratelimit.Never {
			t.Errorf("cost %d over burst %d: %+v, want denied with RetryAfter Never", c.Cost, c.Limit.Burst, o)
		}
		unchanged(t, want, "a cost over the burst")
		ok, _, err := s.applyAll(t, st, []ratelimit.Check{good, c})
		if err != nil || ok {
			t.Errorf("composite with a cost over the burst: allowed=%t err=%v, want denied without error", ok, err)
		}
		unchanged(t, want, "a composite with a cost over the burst")
	})
	t.Run("ShortOutcomes", func(t *testing.T) {
		want := s.remaining(t, st, good)
		ctx, cancel := s.opContext(t)
		defer cancel()
		_, err := st.ApplyAll(ctx, []ratelimit.Check{good, good}, make([]ratelimit.Outcome, 1))
		if d := invalid(err, ratelimit.ErrInvalidOption); d != "" {
			t.Errorf("ApplyAll with 2 checks and 1 outcome slot: %s", d)
		}
		unchanged(t, want, "ApplyAll with too few outcome slots")
	})
}
