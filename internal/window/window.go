// Package window gives the window algorithms (fixedwindow, slidingwindow,
// slidinglog) and their native ports one definition of the window a Limit
// means: W = Burst·Period/Count long, admitting Burst units, so that the
// long-run rate is Count per Period and Burst is the most admitted at once.
package window

import (
	"fmt"
	"math/bits"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// Of returns l as one window: Period is W = Burst·Period/Count (rounded up
// to a whole nanosecond when Validate refuses l) and Count is Burst. It is
// idempotent, and returns l unchanged when Count equals Burst. l must be a
// valid Limit.
func Of(l ratelimit.Limit) ratelimit.Limit {
	if l.Count == l.Burst {
		return l
	}
	return ratelimit.Limit{Count: l.Burst, Period: l.FillTime(), Burst: l.Burst}
}

// Validate refuses, wrapping ratelimit.ErrInvalidLimit, a valid Limit
// whose window Burst·Period/Count is not a whole number of nanoseconds;
// algorithm names the caller in the message.
func Validate(algorithm string, l ratelimit.Limit) error {
	if l.Count == l.Burst || l.Count <= 0 || l.Period <= 0 || l.Burst <= 0 {
		return nil
	}
	hi, lo := bits.Mul64(uint64(l.Burst), uint64(l.Period))
	if hi >= uint64(l.Count) {
		return nil // larger than any valid window; Limit.Validate refuses it
	}
	if _, rem := bits.Div64(hi, lo, uint64(l.Count)); rem != 0 {
		return fmt.Errorf("%w: %s: the window Burst·Period/Count = %d·%s/%d is not a whole number of nanoseconds; choose Burst and Period so that Count divides Burst·Period (for example Burst %d)",
			ratelimit.ErrInvalidLimit, algorithm, l.Burst, l.Period, l.Count, suggestBurst(l))
	}
	return nil
}

// suggestBurst returns the multiple of Count/gcd(Count, Period) nearest
// above Burst: a burst that makes the window whole.
func suggestBurst(l ratelimit.Limit) int64 {
	step := l.Count / gcd(l.Count, int64(l.Period))
	return (l.Burst + step - 1) / step * step
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// MaxUsed bounds the count a state may carry: Burst·(MaxWindowSpan/W + 1)
// for the window W = Burst·Period/Count, at most 2^62, so that carrying it
// off takes at most MaxWindowSpan plus a window. Charge stops there. The
// fixed window and its native port (redisstore's Lua script) share it.
func MaxUsed(l ratelimit.Limit) int64 {
	l = Of(l)
	k := int64(ratelimit.MaxWindowSpan/l.Period) + 1
	if l.Burst > (1<<62)/k {
		return 1 << 62
	}
	return l.Burst * k
}
