package gcra

import (
	"bytes"
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/arith"
)

// Tag is the first byte of every state this package writes: algorithm 2,
// encoding version 1.
const Tag byte = 0x21

// StateLen is the length of an encoded state in bytes.
const StateLen = 17

// Algorithm is the generic cell rate algorithm. The zero value is ready to
// use; it has no fields and is safe for concurrent use. It implements
// ratelimit.Algorithm, ratelimit.Reserver, ratelimit.Refunder and
// ratelimit.Charger.
type Algorithm struct{}

// New returns the GCRA algorithm.
func New() Algorithm { return Algorithm{} }

var (
	_ ratelimit.Algorithm = Algorithm{}
	_ ratelimit.Reserver  = Algorithm{}
	_ ratelimit.Refunder  = Algorithm{}
	_ ratelimit.Charger   = Algorithm{}
)

// Name returns "gcra".
func (Algorithm) Name() string { return "gcra" }

// span is the exact rational duration Q + R/Count nanoseconds, 0 <= R <
// Count. Q may be negative.
type span struct{ q, r int64 }

func (a span) less(b span) bool { return a.q < b.q || (a.q == b.q && a.r < b.r) }

func (a span) sub(b span, c int64) span {
	s := span{a.q - b.q, a.r - b.r}
	if s.r < 0 {
		s.r += c
		s.q--
	}
	return s
}

func (a span) add(b span, c int64) span {
	s := span{a.q + b.q, a.r + b.r}
	if s.r >= c {
		s.r -= c
		s.q++
	}
	return s
}

// ceil returns the span rounded up to whole nanoseconds, at least 0.
func (a span) ceil() time.Duration {
	if a.q < 0 {
		return 0
	}
	if a.r > 0 {
		return time.Duration(a.q + 1)
	}
	return time.Duration(a.q)
}

// units returns the span n·Period/Count; n <= MaxCost and the quotient
// must fit (it does for n <= Burst + MaxDebt).
func units(n int64, l ratelimit.Limit) span {
	q, r, ok := arith.MulDivRem(n, int64(l.Period), l.Count)
	if !ok {
		return span{math.MaxInt64 / 2, 0}
	}
	return span{q, r}
}

// view is a decoded state at an instant: a = now − S, the time the bucket
// has refilled since it was empty, clamped to −MaxDebt·T..tau.
type view struct {
	now        int64
	a          span
	tau        span
	full, none bool
}

// debt returns the deepest debt as a span, MaxDebt·Period/Count.
func debt(l ratelimit.Limit) span { return units(arith.MaxDebt(l), l) }

func settle(state []byte, now int64, l ratelimit.Limit) (view, error) {
	now = arith.ClampNow(now)
	v := view{now: now, tau: units(l.Burst, l)}
	if len(state) == 0 {
		v.a, v.full, v.none = v.tau, true, true
		return v, nil
	}
	if len(state) != StateLen || state[0] != Tag {
		return view{}, fmt.Errorf("%w: gcra: %d bytes with tag %#x", ratelimit.ErrCorruptState, len(state), state[0])
	}
	s, f := arith.Int64(state[1:9]), arith.Int64(state[9:17])
	if f < 0 || f >= l.Count {
		f = 0
	}
	// now − (s + f/C) = (now − s) − f/C
	var frac span
	if f > 0 {
		frac = span{0, f}
	}
	if s <= now {
		d := arith.Since(now, s)
		if d > uint64(v.tau.q)+1 {
			v.a = v.tau
		} else {
			v.a = span{int64(d), 0}.sub(frac, l.Count)
		}
	} else {
		d, deepest := arith.Since(s, now), debt(l)
		if d > uint64(deepest.q)+1 {
			v.a = span{}.sub(deepest, l.Count)
		} else {
			v.a = span{-int64(d), 0}.sub(frac, l.Count)
		}
	}
	v.a = v.clamp(v.a, l)
	v.full = !v.a.less(v.tau)
	return v, nil
}

// clamp bounds a to −MaxDebt·T..tau.
func (v view) clamp(a span, l ratelimit.Limit) span {
	if v.tau.less(a) {
		return v.tau
	}
	if a.q >= 0 {
		return a
	}
	if neg := (span{}).sub(debt(l), l.Count); a.less(neg) {
		return neg
	}
	return a
}

// tokens returns the whole tokens available after refilling for a:
// floor(a·Count/Period), 0 when a is negative.
func tokens(a span, l ratelimit.Limit) int64 {
	if a.q < 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a.q), uint64(l.Count))
	var c uint64
	lo, c = bits.Add64(lo, uint64(a.r), 0)
	hi += c
	if hi >= uint64(l.Period) {
		return l.Burst
	}
	q, _ := bits.Div64(hi, lo, uint64(l.Period))
	return min(int64(q), l.Burst)
}

// wait returns the time from now until x tokens are available when the
// refill is a: ceil(x·Period/Count − a).
func wait(a span, x int64, l ratelimit.Limit) time.Duration {
	return units(x, l).sub(a, l.Count).ceil()
}

// encode appends the state S = now − a, or nothing when a is tau (the
// full bucket). ok is false when S does not fit in an int64.
func (v view) encode(dst []byte, a span, l ratelimit.Limit) (out []byte, ok bool) {
	dst = dst[:0]
	if !a.less(v.tau) {
		return dst, true
	}
	// S = now − a.q − a.r/C = (now − a.q − 1) + (C − a.r)/C when a.r > 0.
	s, f := v.now, int64(0)
	q := a.q
	if a.r > 0 {
		q++
		f = l.Count - a.r
	}
	if q < 0 && s > math.MaxInt64+q {
		return dst, false
	}
	s -= q
	dst = append(dst, Tag)
	dst = arith.AppendInt64(dst, s)
	return arith.AppendInt64(dst, f), true
}

// outcome describes the state with refill a.
func (v view) outcome(a span, l ratelimit.Limit) ratelimit.Outcome {
	o := ratelimit.Outcome{Remaining: tokens(a, l)}
	o.ResetAfter = v.tau.sub(a, l.Count).ceil()
	o.TTL = o.ResetAfter
	return o
}

// keep returns the outcome of a call that changes nothing.
func (v view) keep(state, dst []byte, l ratelimit.Limit) (ratelimit.Outcome, []byte) {
	o := v.outcome(v.a, l)
	if v.none {
		o.TTL = 0
	}
	return o, append(dst[:0], state...)
}

// commit writes the state with refill a; ok is false when it cannot be
// represented, and then nothing is written.
func (v view) commit(state, dst []byte, a span, l ratelimit.Limit) (ratelimit.Outcome, []byte, bool) {
	out, ok := v.encode(dst, a, l)
	if !ok {
		return ratelimit.Outcome{}, out, false
	}
	o := v.outcome(a, l)
	o.Allowed = true
	o.Changed = !bytes.Equal(state, out)
	return o, out, true
}

// Decide takes cost units at now if the bucket holds them. See the package
// documentation for the exact rules; errors wrap ratelimit.ErrCorruptState.
func (a Algorithm) Decide(state []byte, now int64, l ratelimit.Limit, cost int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	v, err := settle(state, now, l)
	if err != nil {
		return ratelimit.Outcome{}, dst[:0], err
	}
	if cost == 0 || cost > l.Burst {
		o, out := v.keep(state, dst, l)
		if cost == 0 {
			o.RetryAfter = wait(v.a, 1, l)
			o.Allowed = o.RetryAfter == 0
		} else {
			o.RetryAfter = ratelimit.Never
		}
		return o, out, nil
	}
	u := units(cost, l)
	if w := u.sub(v.a, l.Count).ceil(); w > 0 {
		o, out := v.keep(state, dst, l)
		o.RetryAfter = w
		return o, out, nil
	}
	// commit and outcome, written out for the hot path. a' = a − cost·T
	// >= 0, so S' = now − a' <= now always fits.
	next := v.a.sub(u, l.Count)
	out, _ := v.encode(dst, next, l)
	// From the full bucket, a = τ = Burst·T and a' = (Burst−cost)·T
	// exactly, so Remaining is Burst−cost and ResetAfter is ceil(cost·T),
	// without outcome's division.
	remaining, reset := l.Burst-cost, u.ceil()
	if !v.full {
		remaining, reset = tokens(next, l), v.tau.sub(next, l.Count).ceil()
	}
	return ratelimit.Outcome{
		Allowed:    true,
		Changed:    !bytes.Equal(state, out),
		Remaining:  remaining,
		ResetAfter: reset,
		TTL:        reset,
	}, out, nil
}

// Reserve takes cost units now, going into debt when the bucket holds
// fewer, and reports in Outcome.Delay how long the caller must wait. When
// the delay exceeds maxWait, or cost exceeds Burst, nothing changes and
// Allowed is false with RetryAfter the delay needed (Never above Burst).
// Cost 0 is a peek, as for Decide. Errors wrap ratelimit.ErrCorruptState.
func (a Algorithm) Reserve(state []byte, now int64, l ratelimit.Limit, cost int64, maxWait time.Duration, dst []byte) (ratelimit.Outcome, []byte, error) {
	if cost == 0 || cost > l.Burst {
		return a.Decide(state, now, l, cost, dst)
	}
	v, err := settle(state, now, l)
	if err != nil {
		return ratelimit.Outcome{}, dst[:0], err
	}
	delay := wait(v.a, cost, l)
	next := v.a.sub(units(cost, l), l.Count)
	if delay <= maxWait && !next.less(v.clamp(next, l)) {
		if o, out, ok := v.commit(state, dst, next, l); ok {
			o.Delay = delay
			return o, out, nil
		}
	}
	o, out := v.keep(state, dst, l)
	o.RetryAfter = delay
	return o, out, nil
}

// Refund gives back amount units, never above Burst. The outcome is
// Allowed, with Remaining, ResetAfter and TTL of the new state. Errors wrap
// ratelimit.ErrCorruptState.
func (a Algorithm) Refund(state []byte, now int64, l ratelimit.Limit, amount int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	v, err := settle(state, now, l)
	if err != nil {
		return ratelimit.Outcome{}, dst[:0], err
	}
	if amount == 0 || v.full {
		o, out := v.keep(state, dst, l)
		o.Allowed = true
		return o, out, nil
	}
	next := v.clamp(v.a.add(units(min(amount, l.Burst+arith.MaxDebt(l)), l), l.Count), l)
	o, out, _ := v.commit(state, dst, next, l)
	return o, out, nil
}

// Charge takes amount units unconditionally, as consumed elsewhere: the
// state may go into debt, down to MaxDebt units (see the package
// documentation). The outcome reports the state after the charge as a peek
// would: Allowed when one unit is available, else RetryAfter until it is;
// Remaining is 0 in debt. Errors wrap ratelimit.ErrCorruptState.
func (a Algorithm) Charge(state []byte, now int64, l ratelimit.Limit, amount int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	v, err := settle(state, now, l)
	if err != nil {
		return ratelimit.Outcome{}, dst[:0], err
	}
	next := v.a
	if amount > 0 {
		next = v.clamp(v.a.sub(units(min(amount, arith.MaxDebt(l)+l.Burst), l), l.Count), l)
	}
	o, out, ok := v.commit(state, dst, next, l)
	if !ok {
		// S would pass the largest instant (only when now > 0): keep the
		// deepest debt that fits, S = MaxInt64.
		next = span{v.now - math.MaxInt64, 0}
		o, out, _ = v.commit(state, dst, next, l)
	}
	if amount == 0 {
		o, out = v.keep(state, dst, l)
	}
	o.RetryAfter = wait(next, 1, l)
	o.Allowed = o.RetryAfter == 0
	return o, out, nil
}
