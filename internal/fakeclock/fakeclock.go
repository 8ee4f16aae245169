// Package fakeclock is a settable ratelimit.Clock for tests.
package fakeclock

import (
	"sync/atomic"
	"time"
)

// Start is where New's clocks begin: 2026-01-01 00:00 UTC, a boundary of
// every unit up to a year.
var Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Clock is a clock that moves only when told. It is safe for concurrent
// use.
type Clock struct{ ns atomic.Int64 }

// New returns a Clock reading Start.
func New() *Clock {
	c := &Clock{}
	c.ns.Store(Start.UnixNano())
	return c
}

// Now returns the clock's time in Unix nanoseconds.
func (c *Clock) Now() int64 { return c.ns.Load() }

// Advance moves the clock forward by d (backward when d is negative).
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
