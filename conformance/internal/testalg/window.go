package testalg

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// stateLen is the encoded size of a Window state: window start and units
// used, both big-endian int64.
const stateLen = 16

// Window is a fixed-window counter: at most Limit.Burst units per window
// of Burst·Period/Count (Limit.FillTime, rounded up), windows aligned to
// multiples of that length since the Unix epoch, so the long-run rate is
// Count per Period. Times before the Unix epoch are treated as the epoch.
//
// The state is 16 bytes: the start of the window in Unix nanoseconds and
// the units used in it. The zero value is ready to use and safe for
// concurrent use.
type Window struct{}

// Name returns "testalg-window".
func (Window) Name() string { return "testalg-window" }

// Decide implements ratelimit.Algorithm.
func (Window) Decide(state []byte, now int64, l ratelimit.Limit, cost int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	start, used, err := decode(state)
	if err != nil {
		return ratelimit.Outcome{}, dst[:0], err
	}
	if now < 0 {
		now = 0
	}
	// The clock going backwards keeps the recorded window; durations stay
	// measured from the caller's now, so they grow instead of shrinking.
	at := max(now, start)
	period := int64(l.FillTime())
	cur := at - at%period
	if cur != start || len(state) == 0 {
		start, used = cur, 0
	}
	left := time.Duration(saturatingAdd(start, period) - now)
	if start > (1<<63-1)-period {
		left = ratelimit.Never // the last window of time never ends
	}
	out := ratelimit.Outcome{Remaining: max(l.Burst-used, 0)}
	if used > 0 {
		out.ResetAfter = left
		out.TTL = left
	}
	switch {
	case cost == 0:
		out.Allowed = used < l.Burst
		if !out.Allowed {
			out.RetryAfter = left
		}
		return out, append(dst[:0], state...), nil
	case cost > l.Burst:
		out.RetryAfter = ratelimit.Never
		return out, append(dst[:0], state...), nil
	case used+cost > l.Burst:
		out.RetryAfter = left
		return out, append(dst[:0], state...), nil
	}
	used += cost
	out.Allowed, out.Changed = true, true
	out.Remaining = l.Burst - used
	out.ResetAfter, out.TTL = left, left
	return out, encode(dst[:0], start, used), nil
}

func decode(state []byte) (start, used int64, err error) {
	if len(state) == 0 {
		return 0, 0, nil
	}
	if len(state) != stateLen {
		return 0, 0, fmt.Errorf("%w: testalg-window state of %d bytes, want %d", ratelimit.ErrCorruptState, len(state), stateLen)
	}
	start = int64(binary.BigEndian.Uint64(state))
	used = int64(binary.BigEndian.Uint64(state[8:]))
	if start < 0 || used < 0 || used > ratelimit.MaxCount {
		return 0, 0, fmt.Errorf("%w: testalg-window state out of range", ratelimit.ErrCorruptState)
	}
	return start, used, nil
}

func encode(dst []byte, start, used int64) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(start))
	return binary.BigEndian.AppendUint64(dst, uint64(used))
}

func saturatingAdd(a, b int64) int64 {
	if b > 0 && a > (1<<63-1)-b {
		return 1<<63 - 1
	}
	return a + b
}

var _ ratelimit.Algorithm = Window{}
