package tier

import "sync/atomic"

// health tracks whether the backing store is failing. While it is, at
// most one call per probe interval reaches it; the others are decided
// from local state or fail fast, so no call waits on a dead store.
type health struct {
	probeInterval int64
	down          atomic.Bool
	nextProbe     atomic.Int64 // local ns from which one caller may probe
}

// usable reports whether a call may go to the backing store now: always
// while it is healthy, and for one caller per probe interval while it is
// failing.
func (h *health) usable(now int64) bool {
	if !h.down.Load() {
		return true
	}
	next := h.nextProbe.Load()
	return now >= next && h.nextProbe.CompareAndSwap(next, now+h.probeInterval)
}

// degraded reports whether the backing store is failing.
func (h *health) degraded() bool { return h.down.Load() }

// failed records a failure at now.
func (h *health) failed(now int64) {
	h.nextProbe.Store(now + h.probeInterval)
	h.down.Store(true)
}

// recovered records a success and reports whether the store was failing.
func (h *health) recovered() bool {
	return h.down.Load() && h.down.CompareAndSwap(true, false)
}
