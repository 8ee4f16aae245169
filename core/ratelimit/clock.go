package ratelimit

import "time"

// Clock supplies the current time to stores that keep their own time (the
// embedded memory store and the gossip cluster). Remote stores use their
// server's clock instead. Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns the current time in Unix nanoseconds.
	Now() int64
}

// clockBase anchors SystemClock: the wall time when the process started,
// with its monotonic reading.
var (
	clockBase   = time.Now()
	clockBaseNs = clockBase.UnixNano()
)

// SystemClock is the process clock: the wall time at process start plus
// the monotonic time elapsed since. It never goes backwards, and reading it
// costs one monotonic clock read instead of time.Now's two. It does not
// follow steps of the wall clock made after the process started (an NTP
// correction, a manual change); that is deliberate for rate limiting, where
// a stepped clock would otherwise mint or withhold capacity.
type SystemClock struct{}

// Now returns the current time in Unix nanoseconds as described above.
func (SystemClock) Now() int64 { return clockBaseNs + int64(time.Since(clockBase)) }

// ClockFunc adapts a function to the Clock interface.
type ClockFunc func() int64

// Now calls f.
func (f ClockFunc) Now() int64 { return f() }
