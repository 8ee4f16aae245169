package ratelimit_test

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// tat is a minimal GCRA used only by these tests (the real algorithms live
// in another module). State: 8 bytes, the theoretical arrival time.
type tat struct{}

func (tat) Name() string { return "test-tat" }

func interval(l ratelimit.Limit) int64 {
	return int64(ratelimit.MulDivCeil(1, int64(l.Period), l.Count))
}

func (tat) load(state []byte, now int64) (int64, error) {
	switch len(state) {
	case 0:
		return now, nil
	case 8:
		return max(int64(binary.BigEndian.Uint64(state)), now), nil
	}
	return 0, fmt.Errorf("%w: %d bytes", ratelimit.ErrCorruptState, len(state))
}

func (a tat) Decide(state []byte, now int64, l ratelimit.Limit, cost int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	return a.take(state, now, l, cost, 0, dst, false)
}

func (a tat) Reserve(state []byte, now int64, l ratelimit.Limit, cost int64, maxWait time.Duration, dst []byte) (ratelimit.Outcome, []byte, error) {
	return a.take(state, now, l, cost, maxWait, dst, true)
}

func (a tat) take(state []byte, now int64, l ratelimit.Limit, cost int64, maxWait time.Duration, dst []byte, reserve bool) (ratelimit.Outcome, []byte, error) {
	t, err := a.load(state, now)
	if err != nil {
		return ratelimit.Outcome{}, dst[:0], err
	}
	iv := interval(l)
	tau := iv * l.Burst
	if cost > l.Burst {
		return ratelimit.Outcome{RetryAfter: ratelimit.Never, ResetAfter: time.Duration(t - now)}, append(dst[:0], state...), nil
	}
	newT := t + cost*iv
	start := t + max(cost, 1)*iv - tau // earliest time the request (or, for a peek, one unit) may act
	remaining := func(tt int64) int64 { return max((now+tau-tt)/iv, 0) }
	if start > now {
		wait := time.Duration(start - now)
		if !reserve || wait > maxWait || cost == 0 {
			return ratelimit.Outcome{Remaining: remaining(t), RetryAfter: wait, ResetAfter: time.Duration(t - now)}, append(dst[:0], state...), nil
		}
	}
	if cost == 0 {
		return ratelimit.Outcome{Allowed: true, Remaining: remaining(t), ResetAfter: time.Duration(t - now), TTL: time.Duration(t - now)}, append(dst[:0], state...), nil
	}
	out := binary.BigEndian.AppendUint64(dst[:0], uint64(newT))
	return ratelimit.Outcome{Allowed: true, Changed: true, Remaining: remaining(newT), ResetAfter: time.Duration(newT - now), TTL: time.Duration(newT - now), Delay: time.Duration(max(start-now, 0))}, out, nil
}

func (a tat) Refund(state []byte, now int64, l ratelimit.Limit, amount int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	t, err := a.load(state, now)
	if err != nil {
		return ratelimit.Outcome{}, dst[:0], err
	}
	t = max(t-amount*interval(l), now)
	out := binary.BigEndian.AppendUint64(dst[:0], uint64(t))
	return ratelimit.Outcome{Allowed: true, Changed: true, TTL: time.Duration(t - now), ResetAfter: time.Duration(t - now)}, out, nil
}

// fakeClock is a settable clock.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() int64              { return c.ns.Load() }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
