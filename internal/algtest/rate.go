package algtest

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/arith"
	"github.com/sluicehq/sluice/internal/muldiv"
)

// RateLimits returns the limits Rate runs by default: Burst below, equal
// to and above Count, at slow and fast rates. {7, 3s, 1} has a window
// 3/7 s long, which the window algorithms refuse.
func RateLimits() []ratelimit.Limit {
	return []ratelimit.Limit{
		{Count: 10, Period: time.Second, Burst: 10},
		{Count: 100, Period: time.Minute, Burst: 200},
		{Count: 4, Period: time.Second, Burst: 2},
		{Count: 3, Period: time.Minute, Burst: 7},
		{Count: 1, Period: time.Hour, Burst: 1},
		{Count: 1000, Period: time.Millisecond, Burst: 50},
		{Count: 7, Period: 3 * time.Second, Burst: 1},
	}
}

// Accepts reports whether alg accepts l: l is valid and, when alg is a
// ratelimit.LimitValidator, ValidateLimit returns nil.
func Accepts(alg ratelimit.Algorithm, l ratelimit.Limit) bool {
	if l.Validate() != nil {
		return false
	}
	v, ok := alg.(ratelimit.LimitValidator)
	return !ok || v.ValidateLimit(l) == nil
}

// rateFills is how many times Rate lets a limit refill Burst from empty.
const rateFills = 20

// Rate checks what a Limit means for every algorithm, at fixed instants:
// a greedy client that takes one unit at a time, and after a denial waits
// exactly RetryAfter, is admitted at most Burst units at any one instant,
// and over rateFills·Burst·Period/Count at most Count/Period·T + Burst
// units; with atLeast, also at least Count/Period·T − Burst. Limits alg
// refuses, and limits whose Burst is over 1000 (too slow to drive one unit
// at a time), are left out; it fails when none is left.
func Rate(t *testing.T, alg ratelimit.Algorithm, limits []ratelimit.Limit, atLeast bool) {
	t.Helper()
	ran := 0
	for _, l := range limits {
		if !Accepts(alg, l) || l.Burst > 1000 || int64(l.FillTime()) > (math.MaxInt64-rateStart)/(rateFills+2) {
			continue
		}
		ran++
		t.Run(l.String(), func(t *testing.T) {
			if err := rate(alg, l, atLeast); err != nil {
				t.Fatal(err)
			}
		})
	}
	if ran == 0 {
		t.Fatalf("algtest: %s accepts none of the limits %v", alg.Name(), limits)
	}
}

// rateStart is the first instant of Rate's runs; a third of a window is
// added to it so that runs do not start on a window boundary.
const rateStart = int64(1_790_000_000) * int64(time.Second)

func rate(alg ratelimit.Algorithm, l ratelimit.Limit, atLeast bool) error {
	fill := int64(l.FillTime())
	span := rateFills * fill
	start := rateStart + fill/3 + 1
	end := start + span
	var (
		state    []byte
		admitted int64
		atOnce   int64
	)
	for now := start; now < end; {
		o, next, err := alg.Decide(state, now, l, 1, nil)
		switch {
		case err != nil:
			return fmt.Errorf("under %s, cost 1 at +%s: %w", l, time.Duration(now-start), err)
		case o.Allowed:
			admitted++
			atOnce++
			state = next
			if atOnce > l.Burst {
				return fmt.Errorf("under %s, %d units admitted at the one instant +%s: more than Burst %d at once", l, atOnce, time.Duration(now-start), l.Burst)
			}
			continue
		case o.RetryAfter <= 0 || o.RetryAfter == ratelimit.Never:
			return fmt.Errorf("under %s, cost 1 at +%s denied with RetryAfter %s", l, time.Duration(now-start), o.RetryAfter)
		}
		now += int64(o.RetryAfter)
		atOnce = 0
	}
	// The rate over the run is Count·span/Period units.
	most := muldiv.Floor(l.Count, span, int64(l.Period)) + l.Burst
	least := int64(arith.MulDivCeil(l.Count, span, int64(l.Period))) - l.Burst
	switch {
	case admitted > most:
		return fmt.Errorf("under %s, a greedy client was admitted %d units over %s (%d refills of the burst): more than Count/Period over the run plus Burst, %d", l, admitted, time.Duration(span), rateFills, most)
	case atLeast && admitted < least:
		return fmt.Errorf("under %s, a greedy client was admitted %d units over %s (%d refills of the burst): less than Count/Period over the run minus Burst, %d", l, admitted, time.Duration(span), rateFills, least)
	}
	return nil
}

// ValidateLimit checks the LimitValidator capability of alg on valid
// limits and on limits: every refusal wraps ratelimit.ErrInvalidLimit,
// and ratelimit.Check.Validate refuses exactly the limits ValidateLimit
// refuses, with an error wrapping ErrInvalidLimit. It also calls
// ValidateLimit on invalid limits, which must not panic. It skips when
// alg is not a LimitValidator.
func ValidateLimit(t *testing.T, alg ratelimit.Algorithm, limits []ratelimit.Limit) {
	t.Helper()
	v, ok := alg.(ratelimit.LimitValidator)
	if !ok {
		t.Skip("algtest: the algorithm is not a ratelimit.LimitValidator: it accepts every valid limit")
	}
	for _, l := range append([]ratelimit.Limit{{}, {Count: -1, Period: -1, Burst: -1}}, limits...) {
		what := fmt.Sprintf("ValidateLimit(%+v)", l)
		var err error
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("%s panicked: %v", what, p)
				}
			}()
			err = v.ValidateLimit(l)
		}()
		if l.Validate() != nil {
			continue // invalid limits only must not panic
		}
		if err != nil && !errors.Is(err, ratelimit.ErrInvalidLimit) {
			t.Errorf("%s = %v, want an error wrapping ErrInvalidLimit", what, err)
		}
		c := ratelimit.Check{Key: "k", Algorithm: alg, Limit: l, Cost: 1}
		cerr := c.Validate()
		switch {
		case err != nil && !errors.Is(cerr, ratelimit.ErrInvalidLimit):
			t.Errorf("%s refused it (%v), but Check.Validate gave %v, want an error wrapping ErrInvalidLimit", what, err, cerr)
		case err == nil && cerr != nil:
			t.Errorf("%s accepted it, but Check.Validate refused it: %v", what, cerr)
		}
	}
}

// BurstAboveCount checks a window algorithm on PerMinute(100).WithBurst(200),
// one window of Burst·Period/Count = 2 minutes admitting 200: 200 pass at
// once at a window boundary, one more 90 s later is denied with the given
// RetryAfter and ResetAfter. It also checks that ValidateLimit accepts that
// limit and refuses 1 per 3/7 s (a window of 428571428.57 ns), saying why.
func BurstAboveCount(t *testing.T, alg ratelimit.Algorithm, retry, reset time.Duration) {
	t.Helper()
	const w = int64(1_700_000_040_000_000_000) // a multiple of 2 minutes
	l := ratelimit.PerMinute(100).WithBurst(200)
	o, state, err := alg.Decide(nil, w, l, 200, nil)
	if err != nil || !o.Allowed {
		t.Fatalf("200 at once: %+v, %v", o, err)
	}
	o, _, err = alg.Decide(state, w+int64(90*time.Second), l, 1, nil)
	if err != nil || o.Allowed || o.RetryAfter != retry || o.ResetAfter != reset {
		t.Fatalf("one more 90s later: %+v, %v; want denied, RetryAfter %s, ResetAfter %s", o, err, retry, reset)
	}
	v, ok := alg.(ratelimit.LimitValidator)
	if !ok {
		t.Fatalf("%s is not a ratelimit.LimitValidator", alg.Name())
	}
	if err := v.ValidateLimit(l); err != nil {
		t.Fatalf("ValidateLimit(%s): %v", l, err)
	}
	bad := ratelimit.Limit{Count: 7, Period: 3 * time.Second, Burst: 1}
	if err := v.ValidateLimit(bad); !errors.Is(err, ratelimit.ErrInvalidLimit) || !strings.Contains(err.Error(), "whole number of nanoseconds") {
		t.Fatalf("ValidateLimit(%s) = %v, want ErrInvalidLimit saying the window is not whole", bad, err)
	}
}
