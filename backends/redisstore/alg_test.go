package redisstore_test

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// windowAlg is a fixed-window counter defined here so the generic path is
// tested with an algorithm the store has no Lua program for, as a
// contributed algorithm would be. State: window start and count, 16 bytes.
type windowAlg struct{}

func (windowAlg) Name() string { return "test-window" }

func (windowAlg) Decide(state []byte, now int64, l ratelimit.Limit, cost int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	var start, used int64
	switch len(state) {
	case 0:
	case 16:
		start = int64(binary.BigEndian.Uint64(state))
		used = int64(binary.BigEndian.Uint64(state[8:]))
	default:
		return ratelimit.Outcome{}, dst[:0], fmt.Errorf("%w: %d bytes", ratelimit.ErrCorruptState, len(state))
	}
	now = max(now, start)
	if cur := now - now%int64(l.Period); cur != start {
		start, used = cur, 0
	}
	end := start + int64(l.Period)
	left := l.Burst - used
	o := ratelimit.Outcome{Remaining: max(left, 0), ResetAfter: time.Duration(end - now), TTL: time.Duration(end - now)}
	if used == 0 {
		o.ResetAfter, o.TTL = 0, 0
	}
	switch {
	case cost > l.Burst:
		o.RetryAfter = ratelimit.Never
		return o, append(dst[:0], state...), nil
	case cost == 0:
		o.Allowed = left > 0
		if !o.Allowed {
			o.RetryAfter = time.Duration(end - now)
		}
		return o, append(dst[:0], state...), nil
	case cost > left:
		o.RetryAfter = time.Duration(end - now)
		return o, append(dst[:0], state...), nil
	}
	used += cost
	o.Allowed, o.Changed = true, true
	o.Remaining = l.Burst - used
	o.ResetAfter, o.TTL = time.Duration(end-now), time.Duration(end-now)
	dst = binary.BigEndian.AppendUint64(dst[:0], uint64(start))
	return o, binary.BigEndian.AppendUint64(dst, uint64(used)), nil
}
