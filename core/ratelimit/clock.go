package ratelimit

import "time"

// Clock supplies the current time to stores that keep their own time (the
// embedded memory store and the gossip cluster). Remote stores use their
// server's clock instead. Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns the current time in Unix nanoseconds.
	Now() int64
}

// SystemClock is the wall clock, read with time.Now.
type SystemClock struct{}

// Now returns time.Now().UnixNano().
func (SystemClock) Now() int64 { return time.Now().UnixNano() }

// ClockFunc adapts a function to the Clock interface.
type ClockFunc func() int64

// Now calls f.
func (f ClockFunc) Now() int64 { return f() }
