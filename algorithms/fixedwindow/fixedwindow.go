package fixedwindow

import (
	"bytes"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/arith"
	"github.com/sluicehq/sluice/internal/window"
)

// Tag is the first byte of every state this package writes: algorithm 4,
// encoding version 1.
const Tag byte = 0x41

// StateLen is the length of an encoded state in bytes.
const StateLen = 17

// Algorithm is the fixed window counter. The zero value is ready to use;
// it has no fields and is safe for concurrent use. It implements
// ratelimit.Algorithm, ratelimit.Charger and ratelimit.LimitValidator.
type Algorithm struct{}

// New returns the fixed window algorithm.
func New() Algorithm { return Algorithm{} }

var (
	_ ratelimit.Algorithm      = Algorithm{}
	_ ratelimit.Charger        = Algorithm{}
	_ ratelimit.LimitValidator = Algorithm{}
)

// Name returns "fixedwindow".
func (Algorithm) Name() string { return "fixedwindow" }

// ValidateLimit refuses, wrapping ratelimit.ErrInvalidLimit, a limit whose
// window Burst·Period/Count is not a whole number of nanoseconds.
func (Algorithm) ValidateLimit(l ratelimit.Limit) error { return window.Validate("fixedwindow", l) }

// view is a decoded state at an instant: used units in the window that
// starts at ws, el nanoseconds into it.
type view struct {
	ws, el, used int64
	skew         time.Duration
	none         bool
}

func settle(state []byte, now int64, l ratelimit.Limit) (view, error) {
	now = arith.ClampNow(now)
	p := int64(l.Period)
	cur := view{ws: now - arith.FloorMod(now, p), el: arith.FloorMod(now, p)}
	if len(state) == 0 {
		cur.none = true
		return cur, nil
	}
	if len(state) != StateLen || state[0] != Tag {
		return view{}, fmt.Errorf("%w: fixedwindow: %d bytes with tag %#x", ratelimit.ErrCorruptState, len(state), state[0])
	}
	ws, c := arith.Int64(state[1:9]), arith.Int64(state[9:17])
	if c > l.Burst {
		c = min(c, window.MaxUsed(l))
	}
	c = max(0, c)
	var skew time.Duration
	if now < ws {
		skew = time.Duration(arith.Since(ws, now))
		now = ws
	}
	e := arith.Since(now, ws)
	if e < uint64(p) {
		return view{ws: ws, el: int64(e), used: c, skew: skew}, nil
	}
	// k windows later, k·Burst of the count has been carried off.
	k := e / uint64(p)
	if k >= uint64((c+l.Burst-1)/l.Burst) {
		return cur, nil
	}
	return view{
		ws:   int64(uint64(ws) + k*uint64(p)),
		el:   int64(e % uint64(p)),
		used: c - int64(k)*l.Burst,
		skew: skew,
	}, nil
}

// wait returns the time from the caller's now until x more units fit:
// 0 when used+x <= Burst, else until the start of window
// j = ceil((used+x−Burst)/Burst) after this one.
func (v view) wait(used, x int64, l ratelimit.Limit) time.Duration {
	if used+x <= l.Burst {
		return 0
	}
	j := (used + x - l.Burst + l.Burst - 1) / l.Burst
	return arith.AddDur(v.skew, time.Duration(j*int64(l.Period)-v.el))
}

func (v view) outcome(used int64, l ratelimit.Limit) ratelimit.Outcome {
	o := ratelimit.Outcome{Remaining: max(0, l.Burst-used)}
	if used > 0 {
		o.ResetAfter = v.wait(used, l.Burst, l)
		o.TTL = o.ResetAfter
	}
	return o
}

func (v view) encode(dst []byte, used int64) []byte {
	dst = dst[:0]
	if used == 0 {
		return dst
	}
	dst = append(dst, Tag)
	dst = arith.AppendInt64(dst, v.ws)
	return arith.AppendInt64(dst, used)
}

// Decide counts cost units in the current window if they fit in Burst. See
// the package documentation for the exact rules; errors wrap
// ratelimit.ErrCorruptState.
func (a Algorithm) Decide(state []byte, now int64, l ratelimit.Limit, cost int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	l = window.Of(l)
	v, err := settle(state, now, l)
	if err != nil {
		return ratelimit.Outcome{}, dst[:0], err
	}
	if cost == 0 || cost > l.Burst || v.used+cost > l.Burst {
		o := v.outcome(v.used, l)
		if v.none {
			o.TTL = 0
		}
		switch {
		case cost > l.Burst:
			o.RetryAfter = ratelimit.Never
		case cost == 0:
			o.RetryAfter = v.wait(v.used, 1, l)
			o.Allowed = o.RetryAfter == 0
		default:
			o.RetryAfter = v.wait(v.used, cost, l)
		}
		return o, append(dst[:0], state...), nil
	}
	out := v.encode(dst, v.used+cost)
	o := v.outcome(v.used+cost, l)
	o.Allowed = true
	o.Changed = !bytes.Equal(state, out)
	return o, out, nil
}

// Charge counts amount units consumed elsewhere, unconditionally: the
// count may exceed Burst, and the excess is carried into the following
// windows at Burst per window (up to a count of
// Burst·(MaxWindowSpan/Period+1)). The outcome reports the state after the
// charge as a peek would: Allowed when one unit fits, else RetryAfter until
// it does. Errors wrap ratelimit.ErrCorruptState.
func (a Algorithm) Charge(state []byte, now int64, l ratelimit.Limit, amount int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	l = window.Of(l)
	v, err := settle(state, now, l)
	if err != nil {
		return ratelimit.Outcome{}, dst[:0], err
	}
	used := min(v.used+amount, window.MaxUsed(l))
	out := dst[:0]
	if amount == 0 {
		out = append(out, state...)
	} else {
		out = v.encode(dst, used)
	}
	o := v.outcome(used, l)
	if amount == 0 && v.none {
		o.TTL = 0
	}
	o.RetryAfter = v.wait(used, 1, l)
	o.Allowed = o.RetryAfter == 0
	o.Changed = !bytes.Equal(state, out)
	return o, out, nil
}
