package memstore_test

import (
	"sync/atomic"
	"time"
)

// fakeClock is a settable clock.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() int64              { return c.ns.Load() }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
