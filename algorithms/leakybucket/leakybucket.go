package leakybucket

import (
	"bytes"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/arith"
)

// Tag is the first byte of every state this package writes: algorithm 3,
// encoding version 1.
const Tag byte = 0x31

// StateLen is the length of an encoded state in bytes.
const StateLen = 25

// Algorithm is the leaky bucket, as a meter (Decide) and as a queue
// (Reserve). The zero value is ready to use; it has no fields and is safe
// for concurrent use. It implements ratelimit.Algorithm,
// ratelimit.Reserver, ratelimit.Refunder and ratelimit.Charger.
type Algorithm struct{}

// New returns the leaky bucket algorithm.
func New() Algorithm { return Algorithm{} }

var (
	_ ratelimit.Algorithm = Algorithm{}
	_ ratelimit.Reserver  = Algorithm{}
	_ ratelimit.Refunder  = Algorithm{}
	_ ratelimit.Charger   = Algorithm{}
)

// Name returns "leakybucket".
func (Algorithm) Name() string { return "leakybucket" }

// view is a decoded state settled at an instant. Internally the bucket is
// counted in free room, N = Burst − water, so that it shares the token
// bucket's exact refill arithmetic; the state stores the water.
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
		return view{}, fmt.Errorf("%w: leakybucket: %d bytes with tag %#x", ratelimit.ErrCorruptState, len(state), state[0])
	}
	w, f, t := arith.Int64(state[1:9]), arith.Int64(state[9:17]), arith.Int64(state[17:25])
	// Clamp the water to 0..Burst+MaxDebt+1 before converting it to room,
	// so that no garbage value overflows; Settle clamps the rest.
	if w > l.Burst {
		w = min(w, l.Burst+arith.MaxDebt(l)+1)
	}
	w = max(0, w)
	n := l.Burst - w
	var skew time.Duration
	if now < t {
		skew = time.Duration(arith.Since(t, now))
		now = t
	}
	return view{Bucket: arith.Settle(n, f, t, now, l), skew: skew}, nil
}

// encode appends the bucket with n units of room (Burst − n of water) at
// the view's instant, or nothing when it is empty: the initial state.
func (v view) encode(dst []byte, n int64, l ratelimit.Limit) []byte {
	dst = dst[:0]
	if n >= l.Burst {
		return dst
	}
	dst = append(dst, Tag)
	dst = arith.AppendInt64(dst, l.Burst-n)
	dst = arith.AppendInt64(dst, v.F)
	return arith.AppendInt64(dst, v.T)
}

// outcome describes the bucket with n units of room at the view's instant.
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

// wait is the time from the caller's now until there is room for x units.
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

// Decide pours cost units of water into the bucket at now if they fit:
// level + cost <= Burst. See the package documentation for the exact
// rules; errors wrap ratelimit.ErrCorruptState.
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
	o, out := v.commit(state, dst, v.N-cost, l)
	return o, out, nil
}

// commit writes the bucket with n units of room at the view's instant.
func (v view) commit(state, dst []byte, n int64, l ratelimit.Limit) (ratelimit.Outcome, []byte) {
	out := v.encode(dst, n, l)
	o := v.outcome(n, l)
	o.Allowed = true
	o.Changed = !bytes.Equal(state, out)
	return o, out
}

// Reserve queues cost units: the request is served once all the water
// already in the bucket has drained, and its own water is poured in now.
// Outcome.Delay is that drain time, ceil((water·Period − F)/Count), 0 for
// an empty bucket, so successive reservations are spaced evenly at the
// drain rate. When the delay exceeds maxWait, or cost exceeds Burst,
// nothing changes and Allowed is false with RetryAfter the delay needed
// (Never above Burst). Cost 0 is a peek, as for Decide. Errors wrap
// ratelimit.ErrCorruptState.
func (a Algorithm) Reserve(state []byte, now int64, l ratelimit.Limit, cost int64, maxWait time.Duration, dst []byte) (ratelimit.Outcome, []byte, error) {
	if cost == 0 || cost > l.Burst {
		return a.Decide(state, now, l, cost, dst)
	}
	v, err := settle(state, now, l)
	if err != nil {
		return ratelimit.Outcome{}, dst[:0], err
	}
	delay := v.wait(l.Burst, l)
	if delay > maxWait || v.N-cost < -arith.MaxDebt(l) {
		o, out := v.keep(state, dst, l)
		o.RetryAfter = delay
		return o, out, nil
	}
	o, out := v.commit(state, dst, v.N-cost, l)
	o.Delay = delay
	return o, out, nil
}

// Refund takes amount units of water out, never below empty.
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

// Charge pours amount units of water unconditionally, as admitted
// elsewhere: the level may exceed Burst, up to Burst+MaxDebt (see the
// package documentation). The outcome reports the state after the charge as
// a peek would: Allowed when one unit fits, else RetryAfter until it does;
// Remaining is 0 above Burst. Errors wrap ratelimit.ErrCorruptState.
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
