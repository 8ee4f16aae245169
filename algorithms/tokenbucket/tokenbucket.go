package tokenbucket

import (
	"bytes"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/arith"
)

// Tag is the first byte of every state this package writes: algorithm 1,
// encoding version 1.
const Tag byte = 0x11

// StateLen is the length of an encoded state in bytes.
const StateLen = 25

// Algorithm is the token bucket. The zero value is ready to use; it has no
// fields and is safe for concurrent use. It implements ratelimit.Algorithm,
// ratelimit.Reserver, ratelimit.Refunder and ratelimit.Charger.
type Algorithm struct{}

// New returns the token bucket algorithm.
func New() Algorithm { return Algorithm{} }

var (
	_ ratelimit.Algorithm = Algorithm{}
	_ ratelimit.Reserver  = Algorithm{}
	_ ratelimit.Refunder  = Algorithm{}
	_ ratelimit.Charger   = Algorithm{}
)

// Name returns "tokenbucket".
func (Algorithm) Name() string { return "tokenbucket" }

// view is a decoded state settled at an instant.
type view struct {
	arith.Bucket
	// skew is how far the clock went back behind the recorded instant:
	// waits computed from that instant are lengthened by it.
	skew time.Duration
}

func settle(state []byte, now int64, l ratelimit.Limit) (view, error) {
	now = arith.ClampNow(now)
	if len(state) == 0 {
		return view{Bucket: arith.Full(now, l)}, nil
	}
	if len(state) != StateLen || state[0] != Tag {
		return view{}, fmt.Errorf("%w: tokenbucket: %d bytes with tag %#x", ratelimit.ErrCorruptState, len(state), state[0])
	}
	n, f, t := arith.Int64(state[1:9]), arith.Int64(state[9:17]), arith.Int64(state[17:25])
	var skew time.Duration
	if now < t {
		skew = time.Duration(arith.Since(t, now))
		now = t
	}
	return view{Bucket: arith.Settle(n, f, t, now, l), skew: skew}, nil
}

// encode appends the bucket with n whole tokens at the view's instant, or
// nothing when that is the full, initial bucket.
func (v view) encode(dst []byte, n int64, l ratelimit.Limit) []byte {
	dst = dst[:0]
	if n >= l.Burst {
		return dst
	}
	dst = append(dst, Tag)
	dst = arith.AppendInt64(dst, n)
	dst = arith.AppendInt64(dst, v.F)
	return arith.AppendInt64(dst, v.T)
}

// outcome describes the bucket holding n whole tokens at the view's instant.
func (v view) outcome(n int64, l ratelimit.Limit) ratelimit.Outcome {
	b := v.Bucket
	b.N = n
	o := ratelimit.Outcome{Remaining: max(0, n)}
	if n < l.Burst {
		o.ResetAfter = arith.AddDur(v.skew, b.Wait(l.Burst, l))
		o.TTL = o.ResetAfter
	}
	return o
}

// wait is the time from the caller's now until x tokens are available.
func (v view) wait(x int64, l ratelimit.Limit) time.Duration {
	if v.N >= x {
		return 0
	}
	return arith.AddDur(v.skew, v.Wait(x, l))
}

// keep returns the outcome of a call that changes nothing.
func (v view) keep(state, dst []byte, l ratelimit.Limit) (ratelimit.Outcome, []byte) {
	o := v.outcome(v.N, l)
	if len(state) == 0 {
		o.TTL = 0
	}
	return o, append(dst[:0], state...)
}

// Decide takes cost tokens at now if the bucket holds them. See the
// package documentation for the exact rules; errors wrap
// ratelimit.ErrCorruptState.
func (a Algorithm) Decide(state []byte, now int64, l ratelimit.Limit, cost int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	v, err := settle(state, now, l)
	if err != nil {
		return ratelimit.Outcome{}, dst[:0], err
	}
	if cost == 0 || cost > l.Burst || v.N < cost {
		o, out := v.keep(state, dst, l)
		switch {
		case cost > l.Burst:
			o.RetryAfter = ratelimit.Never
		case cost == 0:
			o.Allowed = v.N >= 1
			o.RetryAfter = v.wait(1, l)
		default:
			o.RetryAfter = v.wait(cost, l)
		}
		return o, out, nil
	}
	// commit and outcome, written out for the hot path: 0 <= n < Burst.
	n := v.N - cost
	out := v.encode(dst, n, l)
	b := v.Bucket
	b.N = n
	reset := arith.AddDur(v.skew, b.Wait(l.Burst, l))
	return ratelimit.Outcome{
		Allowed:    true,
		Changed:    !bytes.Equal(state, out),
		Remaining:  n,
		ResetAfter: reset,
		TTL:        reset,
	}, out, nil
}

// commit writes the bucket with n whole tokens at the view's instant.
func (v view) commit(state, dst []byte, n int64, l ratelimit.Limit) (ratelimit.Outcome, []byte) {
	out := v.encode(dst, n, l)
	o := v.outcome(n, l)
	o.Allowed = true
	o.Changed = !bytes.Equal(state, out)
	return o, out
}

// Reserve takes cost tokens now, going into debt when the bucket holds
// fewer, and reports in Outcome.Delay how long the caller must wait: the
// time until the bucket would have held cost tokens. When that exceeds
// maxWait, or cost exceeds Burst, nothing changes and Allowed is false with
// RetryAfter the delay needed (Never above Burst). Cost 0 is a peek, as for
// Decide. Errors wrap ratelimit.ErrCorruptState.
func (a Algorithm) Reserve(state []byte, now int64, l ratelimit.Limit, cost int64, maxWait time.Duration, dst []byte) (ratelimit.Outcome, []byte, error) {
	if cost == 0 || cost > l.Burst {
		return a.Decide(state, now, l, cost, dst)
	}
	v, err := settle(state, now, l)
	if err != nil {
		return ratelimit.Outcome{}, dst[:0], err
	}
	delay := v.wait(cost, l)
	if delay > maxWait || v.N-cost < -arith.MaxDebt(l) {
		o, out := v.keep(state, dst, l)
		o.RetryAfter = delay
		return o, out, nil
	}
	o, out := v.commit(state, dst, v.N-cost, l)
	o.Delay = delay
	return o, out, nil
}

// Refund gives back amount tokens, never filling the bucket above Burst.
// The outcome is Allowed, with Remaining, ResetAfter and TTL of the new
// state. Errors wrap ratelimit.ErrCorruptState.
func (a Algorithm) Refund(state []byte, now int64, l ratelimit.Limit, amount int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	v, err := settle(state, now, l)
	if err != nil {
		return ratelimit.Outcome{}, dst[:0], err
	}
	if amount == 0 || v.Full {
		o, out := v.keep(state, dst, l)
		o.Allowed = true
		return o, out, nil
	}
	n := v.N + min(amount, l.Burst-v.N)
	o, out := v.commit(state, dst, n, l)
	return o, out, nil
}

// Charge takes amount tokens unconditionally, as consumed elsewhere: the
// bucket may go into debt, down to -MaxDebt (see the package
// documentation). The outcome reports the state after the charge as a peek
// would: Allowed when one token is available, else RetryAfter until it is;
// Remaining is 0 in debt. Errors wrap ratelimit.ErrCorruptState.
func (a Algorithm) Charge(state []byte, now int64, l ratelimit.Limit, amount int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	v, err := settle(state, now, l)
	if err != nil {
		return ratelimit.Outcome{}, dst[:0], err
	}
	if amount == 0 {
		o, out := v.keep(state, dst, l)
		o.Allowed = v.N >= 1
		o.RetryAfter = v.wait(1, l)
		return o, out, nil
	}
	after := v
	after.N = v.N - min(amount, l.Burst+arith.MaxDebt(l))
	if d := arith.MaxDebt(l); after.N < -d {
		after.N, after.F = -d, 0
	}
	o, out := after.commit(state, dst, after.N, l)
	o.Allowed = after.N >= 1
	o.RetryAfter = after.wait(1, l)
	return o, out, nil
}

// PrepareTake returns Decide under limit l, which must be valid, as a
// function that updates a state in place: take decides cost units at now
// from state, writes the outcome to *o and, when o.Changed, the new state
// to state[:n]. state must have a capacity of at least maxState (StateLen)
// bytes. Outcomes, new states and errors are exactly Decide's. The memory
// store uses it on its hot path.
func (a Algorithm) PrepareTake(l ratelimit.Limit) (take func(state []byte, now, cost int64, o *ratelimit.Outcome) (n int, err error), maxState int) {
	return func(state []byte, now, cost int64, o *ratelimit.Outcome) (int, error) {
		var buf [StateLen]byte
		res, out, err := a.Decide(state, now, l, cost, buf[:0])
		if err != nil {
			return 0, err
		}
		// Field by field: a struct copy's 16-byte loads would stall on the
		// 8-byte stores Decide just made.
		o.Allowed, o.Changed, o.Remaining = res.Allowed, res.Changed, res.Remaining
		o.RetryAfter, o.ResetAfter, o.Delay, o.TTL = res.RetryAfter, res.ResetAfter, res.Delay, res.TTL
		if res.Changed {
			copy(state[:len(out)], out)
		}
		return len(out), nil
	}, StateLen
}
