package algotest

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/conformance/models"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/algtest"
	"pgregory.net/rapid"
)

// Option configures Run. Options are made by the With functions of this
// package.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	model          models.Model
	limits         []ratelimit.Limit
	underAdmission bool
}

// WithModel makes Run compare every decision of generated sequences with
// m, a reference model of the algorithm. Without it, decisions are only
// checked against the contract.
func WithModel(m models.Model) Option {
	return optionFunc(func(c *config) error {
		if m == nil {
			return errors.New("algotest: nil model")
		}
		c.model = m
		return nil
	})
}

// WithUnderAdmission declares that the algorithm may admit less than
// Count per Period in the long run (the sliding window counter's rounded-up
// estimate does): Rate then checks only that it admits no more.
func WithUnderAdmission() Option {
	return optionFunc(func(c *config) error {
		c.underAdmission = true
		return nil
	})
}

// WithLimits replaces the limits generated sequences are drawn under
// (DefaultLimits). Every limit must be valid; those the algorithm's
// LimitValidator refuses are left out.
func WithLimits(limits ...ratelimit.Limit) Option {
	return optionFunc(func(c *config) error {
		if len(limits) == 0 {
			return errors.New("algotest: no limits")
		}
		for _, l := range limits {
			if err := l.Validate(); err != nil {
				return fmt.Errorf("algotest: %w", err)
			}
		}
		c.limits = append([]ratelimit.Limit(nil), limits...)
		return nil
	})
}

// DefaultLimits returns the limits generated sequences are drawn under by
// default: slow and fast refill, burst below, equal to and above the
// count, one-unit buckets, and the largest counts and periods allowed.
func DefaultLimits() []ratelimit.Limit {
	return []ratelimit.Limit{
		{Count: 10, Period: time.Second, Burst: 10},
		{Count: 3, Period: time.Minute, Burst: 7},
		{Count: 7, Period: 3 * time.Second, Burst: 1},
		{Count: 1000, Period: time.Millisecond, Burst: 50},
		{Count: 1, Period: time.Hour, Burst: 3},
		{Count: 3, Period: 10 * time.Nanosecond, Burst: 2},
		{Count: ratelimit.MaxCount, Period: time.Hour, Burst: ratelimit.MaxCount},
		{Count: 1, Period: ratelimit.MaxPeriod, Burst: 10},
		{Count: 4, Period: time.Second, Burst: 2},
	}
}

// Run checks alg against the Algorithm contract, reporting each violation
// as a failure of a named subtest of t. It fails at once on a bad option.
func Run(t *testing.T, alg ratelimit.Algorithm, opts ...Option) {
	t.Helper()
	if alg == nil {
		t.Fatal("algotest: nil algorithm")
	}
	cfg := config{limits: DefaultLimits()}
	for _, o := range opts {
		if o == nil {
			t.Fatal("algotest: nil option")
		}
		if err := o.apply(&cfg); err != nil {
			t.Fatal(err)
		}
	}
	if cfg.model != nil && cfg.model.Algorithm() != alg.Name() {
		t.Fatalf("algotest: model of %q given for algorithm %q", cfg.model.Algorithm(), alg.Name())
	}
	given := cfg.limits
	cfg.limits = nil
	for _, l := range given {
		if algtest.Accepts(alg, l) {
			cfg.limits = append(cfg.limits, l)
		}
	}
	if len(cfg.limits) == 0 {
		t.Fatalf("algotest: %s refuses every limit of %v", alg.Name(), given)
	}
	s := &suite{alg: alg, cfg: cfg}
	t.Run("Model", s.testModel)
	t.Run("Contract", s.testContract)
	t.Run("ClockBackwards", s.testClockBackwards)
	t.Run("TTL", s.testTTL)
	t.Run("Edges", func(t *testing.T) { algtest.Edges(t, alg) })
	t.Run("Garbage", s.testGarbage)
	t.Run("Allocs", func(t *testing.T) { algtest.Allocs(t, alg) })
	t.Run("Concurrent", func(t *testing.T) { algtest.Concurrent(t, alg) })
	t.Run("Capabilities", s.testCapabilities)
	t.Run("Rate", func(t *testing.T) {
		algtest.Rate(t, alg, append(algtest.RateLimits(), cfg.limits...), !cfg.underAdmission)
	})
	t.Run("ValidateLimit", func(t *testing.T) {
		algtest.ValidateLimit(t, alg, append(append(algtest.RateLimits(), given...), algtest.EdgeLimits...))
	})
}

type suite struct {
	alg ratelimit.Algorithm
	cfg config
}

// step is one call of a generated sequence.
type step struct {
	now  int64
	cost int64
}

// String renders the step for failure messages.
func (s step) String() string { return fmt.Sprintf("cost %d at %d", s.cost, s.now) }

// base is the first instant of generated sequences: a recent date, far
// from both int64 limits.
const base = int64(1_790_000_000) * int64(time.Second)

// drawLimit picks one of the configured limits.
func (s *suite) drawLimit(rt *rapid.T) ratelimit.Limit {
	return rapid.SampledFrom(s.cfg.limits).Draw(rt, "limit")
}

// drawCost picks a cost: peeks, one unit, a few units, the whole burst
// and more than the burst.
func drawCost(rt *rapid.T, l ratelimit.Limit) int64 {
	switch rapid.IntRange(0, 9).Draw(rt, "costKind") {
	case 0:
		return 0
	case 1:
		return l.Burst
	case 2:
		return l.Burst + 1
	case 3:
		return rapid.Int64Range(0, l.Burst).Draw(rt, "anyCost")
	default:
		return rapid.Int64Range(1, min(l.Burst, 3)).Draw(rt, "smallCost")
	}
}

// drawGap picks the time between two calls: none, a fraction of a refill
// interval, whole intervals, about a period, a long idle gap, or a step
// backwards when back is true.
func drawGap(rt *rapid.T, l ratelimit.Limit, back bool) int64 {
	interval := max(int64(l.Period)/l.Count, 1)
	kinds := 6
	if back {
		kinds = 8
	}
	switch rapid.IntRange(0, kinds-1).Draw(rt, "gapKind") {
	case 0:
		return 0
	case 1:
		return rapid.Int64Range(1, interval).Draw(rt, "fraction")
	case 2:
		return interval * rapid.Int64Range(1, 5).Draw(rt, "intervals")
	case 3:
		return rapid.Int64Range(1, max(int64(l.Period)*2, 1)).Draw(rt, "period")
	case 4:
		return interval*rapid.Int64Range(1, 3).Draw(rt, "near") + rapid.Int64Range(-2, 2).Draw(rt, "jitter")
	case 5:
		return rapid.Int64Range(int64(l.Period), 2*int64(ratelimit.MaxWindowSpan)).Draw(rt, "idle")
	case 6:
		return -rapid.Int64Range(1, interval).Draw(rt, "backFraction")
	default:
		return -rapid.Int64Range(1, max(int64(l.Period)*2, 1)).Draw(rt, "backPeriod")
	}
}

// drawSteps generates a sequence of calls starting at base.
func drawSteps(rt *rapid.T, l ratelimit.Limit, back bool) []step {
	n := rapid.IntRange(1, 40).Draw(rt, "steps")
	now := base
	steps := make([]step, n)
	for i := range steps {
		gap := drawGap(rt, l, back)
		if gap > 0 && now > math.MaxInt64-gap {
			gap = 0
		}
		now += gap
		steps[i] = step{now: now, cost: drawCost(rt, l)}
	}
	return steps
}

// decide calls the algorithm on a private copy of state, so that a write
// to its input is detected, and fails rt on an error.
func (s *suite) decide(rt *rapid.T, state []byte, now int64, l ratelimit.Limit, cost int64) (ratelimit.Outcome, []byte) {
	rt.Helper()
	in := bytes.Clone(state)
	o, out, err := s.alg.Decide(in, now, l, cost, nil)
	if err != nil {
		rt.Fatalf("Decide(cost %d at %d under %s) on state %x: %v", cost, now, l, state, err)
	}
	if !bytes.Equal(in, state) {
		rt.Fatalf("Decide(cost %d at %d) modified its input state: %x became %x", cost, now, state, in)
	}
	return o, bytes.Clone(out)
}

// testModel compares decisions with the reference model.
func (s *suite) testModel(t *testing.T) {
	if s.cfg.model == nil {
		t.Skip("algotest: no model given (WithModel): decisions are checked against the contract only")
	}
	rapid.Check(t, func(rt *rapid.T) {
		l := s.drawLimit(rt)
		steps := drawSteps(rt, l, true)
		key := s.cfg.model.New(l)
		var state []byte
		for i, st := range steps {
			o, next := s.decide(rt, state, st.now, l, st.cost)
			want := key.Decide(st.now, st.cost)
			if got := models.Of(o); got != want {
				rt.Fatalf("step %d (%s, at +%s) under %s:\nalgorithm %+v\nmodel     %+v", i, st, time.Duration(st.now-base), l, got, want)
			}
			state = next
		}
	})
}
