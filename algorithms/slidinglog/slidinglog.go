package slidinglog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/arith"
	"github.com/sluicehq/sluice/internal/window"
)

// Tag is the first byte of every state this package writes: algorithm 6,
// encoding version 1.
const Tag byte = 0x61

// maxTotal bounds the sum of the counts a state may hold.
const maxTotal = 1 << 62

// Algorithm is the sliding log. The zero value is ready to use; it has no
// fields and is safe for concurrent use. It implements ratelimit.Algorithm
// and ratelimit.LimitValidator.
type Algorithm struct{}

// New returns the sliding log algorithm.
func New() Algorithm { return Algorithm{} }

var (
	_ ratelimit.Algorithm      = Algorithm{}
	_ ratelimit.LimitValidator = Algorithm{}
)

// Name returns "slidinglog".
func (Algorithm) Name() string { return "slidinglog" }

// ValidateLimit refuses, wrapping ratelimit.ErrInvalidLimit, a limit whose
// window Burst·Period/Count is not a whole number of nanoseconds.
func (Algorithm) ValidateLimit(l ratelimit.Limit) error { return window.Validate("slidinglog", l) }

// iter walks the entries of an encoded state.
type iter struct {
	b  []byte
	ts int64
}

// next returns the next entry, ok false at the end, err for malformed
// input.
func (it *iter) next() (ts, count int64, ok bool, err error) {
	if len(it.b) == 0 {
		return 0, 0, false, nil
	}
	d, n := binary.Uvarint(it.b)
	if n <= 0 {
		return 0, 0, false, errCorrupt("bad delta")
	}
	it.b = it.b[n:]
	c, n := binary.Uvarint(it.b)
	if n <= 0 || c == 0 || c > maxTotal {
		return 0, 0, false, errCorrupt("bad count")
	}
	it.b = it.b[n:]
	if d > uint64(math.MaxInt64-it.ts) {
		return 0, 0, false, errCorrupt("timestamp overflow")
	}
	it.ts += int64(d)
	return it.ts, int64(c), true, nil
}

func errCorrupt(what string) error {
	return fmt.Errorf("%w: slidinglog: %s", ratelimit.ErrCorruptState, what)
}

// view is a decoded state at an instant: the entries whose timestamps are
// within the last Period before now (the live ones) and their total.
type view struct {
	state []byte
	now   int64 // max(caller's now, last timestamp)
	skew  time.Duration
	used  int64 // total count of live entries
	last  int64 // last timestamp, if used > 0
}

// entries returns an iterator over the state's entries.
func entries(state []byte) iter {
	return iter{b: state[9:], ts: arith.Int64(state[1:9])}
}

func settle(state []byte, now int64, l ratelimit.Limit) (view, error) {
	v := view{state: state, now: arith.ClampNow(now)}
	if len(state) == 0 {
		return v, nil
	}
	if len(state) < 11 || state[0] != Tag {
		return view{}, fmt.Errorf("%w: slidinglog: %d bytes with tag %#x", ratelimit.ErrCorruptState, len(state), state[0])
	}
	// First pass: validate, find the last timestamp.
	it := entries(state)
	var total int64
	for {
		ts, c, ok, err := it.next()
		if err != nil {
			return view{}, err
		}
		if !ok {
			break
		}
		if total += c; total > maxTotal {
			return view{}, errCorrupt("counts overflow")
		}
		v.last = ts
	}
	if v.now < v.last {
		v.skew = time.Duration(arith.Since(v.last, v.now))
		v.now = v.last
	}
	// Second pass: total the live entries.
	it = entries(state)
	for {
		ts, c, ok, _ := it.next()
		if !ok {
			break
		}
		if v.live(ts, l) {
			v.used += c
		}
	}
	return v, nil
}

// live reports whether an entry at ts still counts at v.now: now − ts <
// Period.
func (v view) live(ts int64, l ratelimit.Limit) bool {
	return arith.Since(v.now, ts) < uint64(l.Period)
}

// expiry returns the time from the caller's now until an entry at ts
// stops counting: skew + Period − (now − ts).
func (v view) expiry(ts int64, l ratelimit.Limit) time.Duration {
	return arith.AddDur(v.skew, l.Period-time.Duration(arith.Since(v.now, ts)))
}

// wait returns the time from the caller's now until x more units fit: the
// expiry of the entry at which the live counts, oldest first, add up to
// used + x − Burst.
func (v view) wait(x int64, l ratelimit.Limit) time.Duration {
	need := v.used + x - l.Burst
	if need <= 0 {
		return 0
	}
	it := entries(v.state)
	for {
		ts, c, ok, _ := it.next()
		if !ok {
			return ratelimit.Never // unreachable for x <= Burst
		}
		if !v.live(ts, l) {
			continue
		}
		if need -= c; need <= 0 {
			return v.expiry(ts, l)
		}
	}
}

func (v view) outcome(used int64, l ratelimit.Limit) ratelimit.Outcome {
	o := ratelimit.Outcome{Remaining: max(0, l.Burst-used)}
	if used > 0 {
		o.ResetAfter = v.expiry(v.last, l)
		o.TTL = o.ResetAfter
	}
	return o
}

// appendWith appends the live entries plus cost units at v.now, merging
// them into the last entry when it has the same timestamp.
func (v view) appendWith(dst []byte, cost int64, l ratelimit.Limit) []byte {
	dst = dst[:0]
	first, prev := true, int64(0)
	put := func(ts, c int64) {
		if first {
			dst = append(dst, Tag)
			dst = arith.AppendInt64(dst, ts)
			prev, first = ts, false
		}
		dst = binary.AppendUvarint(dst, uint64(ts-prev))
		dst = binary.AppendUvarint(dst, uint64(c))
		prev = ts
	}
	if v.used > 0 {
		it := entries(v.state)
		for {
			ts, c, ok, _ := it.next()
			if !ok {
				break
			}
			if !v.live(ts, l) {
				continue
			}
			// Entries are in time order and none is after v.now, so
			// only the newest can share the instant of the new units.
			if ts == v.now {
				c += cost
				cost = 0
			}
			put(ts, c)
		}
	}
	if cost > 0 {
		put(v.now, cost)
	}
	return dst
}

// Decide admits cost units when fewer than Burst − cost were admitted in
// the last Period, and logs them. See the package documentation for the
// exact rules. dst must not overlap state. Errors wrap
// ratelimit.ErrCorruptState.
func (a Algorithm) Decide(state []byte, now int64, l ratelimit.Limit, cost int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	l = window.Of(l)
	v, err := settle(state, now, l)
	if err != nil {
		return ratelimit.Outcome{}, dst[:0], err
	}
	if cost == 0 || cost > l.Burst || v.used+cost > l.Burst {
		o := v.outcome(v.used, l)
		if len(state) == 0 {
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
	out := v.appendWith(dst, cost, l)
	v.last = v.now
	o := v.outcome(v.used+cost, l)
	o.Allowed = true
	o.Changed = !bytes.Equal(state, out)
	return o, out, nil
}
