package gcra

import (
	"bytes"
	"encoding/binary"
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

// params are the constants of a limit that a call derives from it: the
// methods of Algorithm derive them on every call, a prepared take (see
// PrepareTake) once per limit.
type params struct {
	l    ratelimit.Limit
	tau  span // the burst window, Burst·T
	unit span // the emission interval T = Period/Count, when prepared
	deep span // the deepest debt, MaxDebt·T, when prepared
	// prepared reports that unit and deep are set.
	prepared bool
}

func newParams(l ratelimit.Limit) params { return params{l: l, tau: units(l.Burst, l)} }

// units returns n·T.
func (p *params) units(n int64) span {
	if n == 1 && p.prepared {
		return p.unit
	}
	return units(n, p.l)
}

// debt returns the deepest debt as a span, MaxDebt·T.
func (p *params) debt() span {
	if p.prepared {
		return p.deep
	}
	return debt(p.l)
}

// view is a decoded state at an instant: a = now − S, the time the bucket
// has refilled since it was empty, clamped to −MaxDebt·T..tau.
type view struct {
	now        int64
	a          span
	full, none bool
}

// debt returns the deepest debt as a span, MaxDebt·Period/Count.
func debt(l ratelimit.Limit) span { return units(arith.MaxDebt(l), l) }

// settle decodes state at now into *v.
func (p *params) settle(state []byte, now int64, v *view) error {
	now = arith.ClampNow(now)
	*v = view{now: now}
	if len(state) == 0 {
		v.a, v.full, v.none = p.tau, true, true
		return nil
	}
	if len(state) != StateLen || state[0] != Tag {
		return fmt.Errorf("%w: gcra: %d bytes with tag %#x", ratelimit.ErrCorruptState, len(state), state[0])
	}
	c := p.l.Count
	s, f := arith.Int64(state[1:9]), arith.Int64(state[9:17])
	if f < 0 || f >= c {
		f = 0
	}
	// now − (s + f/C) = (now − s) − f/C
	var frac span
	if f > 0 {
		frac = span{0, f}
	}
	if s <= now {
		d := arith.Since(now, s)
		if d > uint64(p.tau.q)+1 {
			v.a = p.tau
		} else {
			v.a = span{int64(d), 0}.sub(frac, c)
		}
	} else {
		d, deepest := arith.Since(s, now), p.debt()
		if d > uint64(deepest.q)+1 {
			v.a = span{}.sub(deepest, c)
		} else {
			v.a = span{-int64(d), 0}.sub(frac, c)
		}
	}
	v.a = p.clamp(v.a)
	v.full = !v.a.less(p.tau)
	return nil
}

// clamp bounds a to −MaxDebt·T..tau.
func (p *params) clamp(a span) span {
	if p.tau.less(a) {
		return p.tau
	}
	if a.q >= 0 {
		return a
	}
	if neg := (span{}).sub(p.debt(), p.l.Count); a.less(neg) {
		return neg
	}
	return a
}

// tokens returns the whole tokens available after refilling for a:
// floor(a·Count/Period), 0 when a is negative.
func tokens(a span, l *ratelimit.Limit) int64 {
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
func (p *params) wait(a span, x int64) time.Duration {
	return p.units(x).sub(a, p.l.Count).ceil()
}

// encode appends the state S = now − a, or nothing when a is tau (the
// full bucket). ok is false when S does not fit in an int64.
func (p *params) encode(v *view, dst []byte, a span) (out []byte, ok bool) {
	dst = dst[:0]
	if !a.less(p.tau) {
		return dst, true
	}
	s := v.now
	q, f := p.encoded(a)
	if q < 0 && s > math.MaxInt64+q {
		return dst, false
	}
	s -= q
	dst = append(dst, Tag)
	dst = arith.AppendInt64(dst, s)
	return arith.AppendInt64(dst, f), true
}

// outcome describes the state with refill a.
func (p *params) outcome(a span) ratelimit.Outcome {
	o := ratelimit.Outcome{Remaining: tokens(a, &p.l)}
	o.ResetAfter = p.tau.sub(a, p.l.Count).ceil()
	o.TTL = o.ResetAfter
	return o
}

// keep writes to *o the outcome of a call that changes nothing and
// returns the unchanged state, appended to dst[:0].
func (p *params) keep(v *view, state, dst []byte, o *ratelimit.Outcome) []byte {
	*o = p.outcome(v.a)
	if v.none {
		o.TTL = 0
	}
	return append(dst[:0], state...)
}

// commit writes the state with refill a; ok is false when it cannot be
// represented, and then nothing is written.
func (p *params) commit(v *view, state, dst []byte, a span) (ratelimit.Outcome, []byte, bool) {
	out, ok := p.encode(v, dst, a)
	if !ok {
		return ratelimit.Outcome{}, out, false
	}
	o := p.outcome(a)
	o.Allowed = true
	o.Changed = !bytes.Equal(state, out)
	return o, out, true
}

// Decide takes cost units at now if the bucket holds them. See the package
// documentation for the exact rules; errors wrap ratelimit.ErrCorruptState.
func (a Algorithm) Decide(state []byte, now int64, l ratelimit.Limit, cost int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	p := newParams(l)
	var (
		v view
		o ratelimit.Outcome
	)
	if err := p.settle(state, now, &v); err != nil {
		return ratelimit.Outcome{}, dst[:0], err
	}
	out := p.decide(&v, state, cost, dst, &o)
	return o, out, nil
}

// decide is Decide on the settled state v, writing the outcome to *o.
func (p *params) decide(v *view, state []byte, cost int64, dst []byte, o *ratelimit.Outcome) []byte {
	if cost == 0 || cost > p.l.Burst {
		out := p.keep(v, state, dst, o)
		if cost == 0 {
			o.RetryAfter = p.wait(v.a, 1)
			o.Allowed = o.RetryAfter == 0
		} else {
			o.RetryAfter = ratelimit.Never
		}
		return out
	}
	u := p.units(cost)
	if w := u.sub(v.a, p.l.Count).ceil(); w > 0 {
		out := p.keep(v, state, dst, o)
		o.RetryAfter = w
		return out
	}
	// commit and outcome, written out for the hot path. a' = a − cost·T
	// >= 0, so S' = now − a' <= now always fits.
	next := v.a.sub(u, p.l.Count)
	out, _ := p.encode(v, dst, next)
	// From the full bucket, a = τ = Burst·T and a' = (Burst−cost)·T
	// exactly, so Remaining is Burst−cost and ResetAfter is ceil(cost·T),
	// without outcome's division.
	remaining, reset := p.l.Burst-cost, u.ceil()
	if !v.full {
		remaining, reset = tokens(next, &p.l), p.tau.sub(next, p.l.Count).ceil()
	}
	admitted(o, !sameState(state, out), remaining, reset)
	return out
}

// admitted writes to *o the outcome of an admitting take. Field by field:
// a composite literal is built aside and copied in 16-byte moves, whose
// loads stall on the 8-byte stores just made.
func admitted(o *ratelimit.Outcome, changed bool, remaining int64, reset time.Duration) {
	o.Allowed = true
	o.Changed = changed
	o.Remaining = remaining
	o.RetryAfter = 0
	o.ResetAfter = reset
	o.Delay = 0
	o.TTL = reset
}

// sameState reports whether the states a and b are equal, comparing a
// full-length state in three loads instead of calling bytes.Equal.
func sameState(a, b []byte) bool {
	if len(a) == StateLen && len(b) == StateLen {
		return a[0] == b[0] && arith.Int64(a[1:9]) == arith.Int64(b[1:9]) && arith.Int64(a[9:17]) == arith.Int64(b[9:17])
	}
	return bytes.Equal(a, b)
}

// PrepareTake returns Decide under limit l, which must be valid, as a
// function that derives l's constants once and updates a state in place:
// take decides cost units at now from state, writes the outcome to *o
// and, when o.Changed, the new state to state[:n]. state must have a
// capacity of at least maxState (StateLen) bytes. Outcomes, new states and
// errors are exactly Decide's. The memory store uses it on its hot path.
func (Algorithm) PrepareTake(l ratelimit.Limit) (take func(state []byte, now, cost int64, o *ratelimit.Outcome) (n int, err error), maxState int) {
	p := newParams(l)
	p.unit, p.deep, p.prepared = units(1, l), debt(l), true
	// One unit taken from the full bucket, the call on a new or expired
	// key, leaves a' = τ − T: admit's state and outcome, derived once.
	lead, frac := p.encoded(p.tau.sub(p.unit, l.Count))
	remaining, reset := l.Burst-1, p.unit.ceil()
	// A closure, not the method value p.take: calling a method value goes
	// through a wrapper, a second call on the hot path.
	return func(state []byte, now, cost int64, o *ratelimit.Outcome) (int, error) {
		if len(state) != 0 || cost != 1 {
			return p.take(state, now, cost, o)
		}
		putState(state[:StateLen], arith.ClampNow(now)-lead, frac)
		admitted(o, true, remaining, reset)
		return StateLen, nil
	}, StateLen
}

// encoded returns how the state S = now − a is written, for any now:
// s = now − lead and f = frac, since S = now − a.q − a.r/C =
// (now − a.q − 1) + (C − a.r)/C when a.r > 0.
func (p *params) encoded(a span) (lead, frac int64) {
	if a.r > 0 {
		return a.q + 1, p.l.Count - a.r
	}
	return a.q, 0
}

// putState writes the state s, f to out, StateLen bytes.
func putState(out []byte, s, f int64) {
	out[0] = Tag
	binary.BigEndian.PutUint64(out[1:9], uint64(s))
	binary.BigEndian.PutUint64(out[9:17], uint64(f))
}

// take is PrepareTake's take on a state, or for a cost, that the
// constants do not answer.
func (p *params) take(state []byte, now, cost int64, o *ratelimit.Outcome) (int, error) {
	var v view
	if err := p.settle(state, now, &v); err != nil {
		return 0, err
	}
	if cost >= 1 && cost <= p.l.Burst {
		if u := p.units(cost); u.sub(v.a, p.l.Count).ceil() <= 0 {
			return p.admit(&v, state, cost, u, o), nil
		}
	}
	var buf [StateLen]byte
	out := p.decide(&v, state, cost, buf[:0], o)
	if o.Changed {
		copy(state[:len(out)], out)
	}
	return len(out), nil
}

// admit is decide's admitting path for take, writing the new state into
// state's array: a' = a − u, u = cost·T > 0, so the bucket is not full
// after and the state is never empty.
func (p *params) admit(v *view, state []byte, cost int64, u span, o *ratelimit.Outcome) int {
	next := v.a.sub(u, p.l.Count)
	lead, f := p.encoded(next)
	s := v.now - lead
	changed := len(state) != StateLen || arith.Int64(state[1:9]) != s || arith.Int64(state[9:17]) != f
	if changed {
		putState(state[:StateLen], s, f)
	}
	remaining, reset := p.l.Burst-cost, u.ceil()
	if !v.full {
		remaining, reset = tokens(next, &p.l), p.tau.sub(next, p.l.Count).ceil()
	}
	admitted(o, changed, remaining, reset)
	return StateLen
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
	p := newParams(l)
	var v view
	if err := p.settle(state, now, &v); err != nil {
		return ratelimit.Outcome{}, dst[:0], err
	}
	delay := p.wait(v.a, cost)
	next := v.a.sub(p.units(cost), l.Count)
	if delay <= maxWait && !next.less(p.clamp(next)) {
		if o, out, ok := p.commit(&v, state, dst, next); ok {
			o.Delay = delay
			return o, out, nil
		}
	}
	var o ratelimit.Outcome
	out := p.keep(&v, state, dst, &o)
	o.RetryAfter = delay
	return o, out, nil
}

// Refund gives back amount units, never above Burst. The outcome is
// Allowed, with Remaining, ResetAfter and TTL of the new state. Errors wrap
// ratelimit.ErrCorruptState.
func (a Algorithm) Refund(state []byte, now int64, l ratelimit.Limit, amount int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	p := newParams(l)
	var v view
	if err := p.settle(state, now, &v); err != nil {
		return ratelimit.Outcome{}, dst[:0], err
	}
	if amount == 0 || v.full {
		var o ratelimit.Outcome
		out := p.keep(&v, state, dst, &o)
		o.Allowed = true
		return o, out, nil
	}
	next := p.clamp(v.a.add(units(min(amount, l.Burst+arith.MaxDebt(l)), l), l.Count))
	o, out, _ := p.commit(&v, state, dst, next)
	return o, out, nil
}

// Charge takes amount units unconditionally, as consumed elsewhere: the
// state may go into debt, down to MaxDebt units (see the package
// documentation). The outcome reports the state after the charge as a peek
// would: Allowed when one unit is available, else RetryAfter until it is;
// Remaining is 0 in debt. Errors wrap ratelimit.ErrCorruptState.
func (a Algorithm) Charge(state []byte, now int64, l ratelimit.Limit, amount int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	p := newParams(l)
	var v view
	if err := p.settle(state, now, &v); err != nil {
		return ratelimit.Outcome{}, dst[:0], err
	}
	next := v.a
	if amount > 0 {
		next = p.clamp(v.a.sub(units(min(amount, arith.MaxDebt(l)+l.Burst), l), l.Count))
	}
	o, out, ok := p.commit(&v, state, dst, next)
	if !ok {
		// S would pass the largest instant (only when now > 0): keep the
		// deepest debt that fits, S = MaxInt64.
		next = span{v.now - math.MaxInt64, 0}
		o, out, _ = p.commit(&v, state, dst, next)
	}
	if amount == 0 {
		out = p.keep(&v, state, dst, &o)
	}
	o.RetryAfter = p.wait(next, 1)
	o.Allowed = o.RetryAfter == 0
	return o, out, nil
}
