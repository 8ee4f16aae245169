package slidingwindow

import (
	"bytes"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/arith"
	"github.com/sluicehq/sluice/internal/muldiv"
	"github.com/sluicehq/sluice/internal/window"
)

// Tag is the first byte of every state this package writes: algorithm 5,
// encoding version 1.
const Tag byte = 0x51

// StateLen is the length of an encoded state in bytes.
const StateLen = 25

// MaxCounted is the largest count a window may hold, 2^61; Charge stops
// there.
const MaxCounted = 1 << 61

// Algorithm is the sliding window counter. The zero value is ready to use;
// it has no fields and is safe for concurrent use. It implements
// ratelimit.Algorithm, ratelimit.Charger and ratelimit.LimitValidator.
type Algorithm struct{}

// New returns the sliding window counter algorithm.
func New() Algorithm { return Algorithm{} }

var (
	_ ratelimit.Algorithm      = Algorithm{}
	_ ratelimit.Charger        = Algorithm{}
	_ ratelimit.LimitValidator = Algorithm{}
)

// Name returns "slidingwindow".
func (Algorithm) Name() string { return "slidingwindow" }

// ValidateLimit refuses, wrapping ratelimit.ErrInvalidLimit, a limit whose
// window Burst·Period/Count is not a whole number of nanoseconds.
func (Algorithm) ValidateLimit(l ratelimit.Limit) error { return window.Validate("slidingwindow", l) }

// view is a decoded state at an instant: the counts of the window starting
// at ws and of the one before, el nanoseconds into the current one.
type view struct {
	ws, el    int64
	cur, prev int64
	skew      time.Duration
	none      bool
}

func settle(state []byte, now int64, l ratelimit.Limit) (view, error) {
	now = arith.ClampNow(now)
	p := int64(l.Period)
	fresh := view{ws: now - arith.FloorMod(now, p), el: arith.FloorMod(now, p)}
	if len(state) == 0 {
		fresh.none = true
		return fresh, nil
	}
	if len(state) != StateLen || state[0] != Tag {
		return view{}, fmt.Errorf("%w: slidingwindow: %d bytes with tag %#x", ratelimit.ErrCorruptState, len(state), state[0])
	}
	v := view{ws: arith.Int64(state[1:9]), cur: arith.Int64(state[9:17]), prev: arith.Int64(state[17:25])}
	v.cur = max(0, min(v.cur, MaxCounted))
	v.prev = max(0, min(v.prev, MaxCounted))
	if now < v.ws {
		v.skew = time.Duration(arith.Since(v.ws, now))
		now = v.ws
	}
	switch e := arith.Since(now, v.ws); {
	case e < uint64(p):
		v.el = int64(e)
	case e < 2*uint64(p):
		v.ws += p
		v.el = int64(e) - p
		v.prev, v.cur = v.cur, 0
	default:
		return fresh, nil
	}
	return v, nil
}

// weighted returns ceil(prev·(Period−el)/Period): the previous window's
// count weighted by the share of it still inside the sliding window,
// rounded up so the estimate never under-counts.
func weighted(prev, el int64, l ratelimit.Limit) int64 {
	return int64(arith.MulDivCeil(prev, int64(l.Period)-el, int64(l.Period)))
}

// estimate returns cur + weighted(prev, el).
func (v view) estimate(l ratelimit.Limit) int64 {
	return v.cur + weighted(v.prev, v.el, l)
}

// from returns the smallest offset y in 0..Period−1 into a window whose
// previous window counted prev at which weighted(prev, y) <= room, or
// Period when there is none: y >= Period − floor(room·Period/prev).
func from(prev, room int64, l ratelimit.Limit) int64 {
	if room < 0 {
		return int64(l.Period)
	}
	if prev == 0 {
		return 0
	}
	return max(0, int64(l.Period)-muldiv.Floor(room, int64(l.Period), prev))
}

// wait returns the exact time from the caller's now until x more units
// pass, for x <= Burst: in this window if the weight of the previous one
// decays enough, else in the next window (where this window's count is
// the previous one), else at the start of the window after.
func (v view) wait(x int64, l ratelimit.Limit) time.Duration {
	p := int64(l.Period)
	var d int64
	if y := from(v.prev, l.Burst-x-v.cur, l); y < p {
		d = max(0, y-v.el)
	} else if y := from(v.cur, l.Burst-x, l); y < p {
		d = p - v.el + y
	} else {
		d = 2*p - v.el
	}
	if d == 0 {
		return 0
	}
	return arith.AddDur(v.skew, time.Duration(d))
}

func (v view) outcome(l ratelimit.Limit) ratelimit.Outcome {
	o := ratelimit.Outcome{Remaining: max(0, l.Burst-v.estimate(l))}
	p := int64(l.Period)
	switch {
	case v.cur > 0:
		o.ResetAfter = arith.AddDur(v.skew, time.Duration(2*p-v.el))
	case v.prev > 0:
		o.ResetAfter = arith.AddDur(v.skew, time.Duration(p-v.el))
	}
	o.TTL = o.ResetAfter
	return o
}

func (v view) encode(dst []byte) []byte {
	dst = dst[:0]
	if v.cur == 0 && v.prev == 0 {
		return dst
	}
	dst = append(dst, Tag)
	dst = arith.AppendInt64(dst, v.ws)
	dst = arith.AppendInt64(dst, v.cur)
	return arith.AppendInt64(dst, v.prev)
}

// Decide counts cost units in the current window if the weighted estimate
// plus cost is at most Burst. See the package documentation for the exact
// rules; errors wrap ratelimit.ErrCorruptState.
func (a Algorithm) Decide(state []byte, now int64, l ratelimit.Limit, cost int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	l = window.Of(l)
	v, err := settle(state, now, l)
	if err != nil {
		return ratelimit.Outcome{}, dst[:0], err
	}
	if cost == 0 || cost > l.Burst || v.estimate(l)+cost > l.Burst {
		o := v.outcome(l)
		if v.none {
			o.TTL = 0
		}
		switch {
		case cost > l.Burst:
			o.RetryAfter = ratelimit.Never
		case cost == 0:
			o.RetryAfter = v.wait(1, l)
			o.Allowed = o.RetryAfter == 0
		default:
			o.RetryAfter = v.wait(cost, l)
		}
		return o, append(dst[:0], state...), nil
	}
	v.cur += cost
	out := v.encode(dst)
	o := v.outcome(l)
	o.Allowed = true
	o.Changed = !bytes.Equal(state, out)
	return o, out, nil
}

// Charge counts amount units consumed elsewhere, unconditionally: the
// estimate may exceed Burst (counts stop at MaxCounted). The outcome
// reports the state after the charge as a peek would: Allowed when one unit
// passes, else RetryAfter until it does. Errors wrap
// ratelimit.ErrCorruptState.
func (a Algorithm) Charge(state []byte, now int64, l ratelimit.Limit, amount int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	l = window.Of(l)
	v, err := settle(state, now, l)
	if err != nil {
		return ratelimit.Outcome{}, dst[:0], err
	}
	out := dst[:0]
	if amount == 0 {
		out = append(out, state...)
	} else {
		v.cur = min(v.cur+amount, MaxCounted)
		out = v.encode(dst)
	}
	o := v.outcome(l)
	if amount == 0 && v.none {
		o.TTL = 0
	}
	o.RetryAfter = v.wait(1, l)
	o.Allowed = o.RetryAfter == 0
	o.Changed = !bytes.Equal(state, out)
	return o, out, nil
}
