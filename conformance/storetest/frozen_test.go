package storetest

import (
	"testing"
	"time"
)

// TestPeriodAwayFrom checks that frozen limits keep the wall clock a day
// away from every window boundary, also when 1000 hours would put one
// right at it.
func TestPeriodAwayFrom(t *testing.T) {
	const start = 1000 * time.Hour
	for _, now := range []int64{
		int64(start) * 498,                  // on a boundary of 1000 hours
		int64(start)*498 - int64(time.Hour), // an hour before one
		int64(start)*498 + 1,                // just after one
		time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC).UnixNano(),
	} {
		p := periodAwayFrom(now, start, frozenMargin)
		off := now % int64(p)
		if p < start || off < int64(frozenMargin) || int64(p)-off < int64(frozenMargin) {
			t.Errorf("periodAwayFrom(%d) = %s: now is %s past a boundary and %s before the next, want both at least %s",
				now, p, time.Duration(off), time.Duration(int64(p)-off), frozenMargin)
		}
	}
	if p := periodAwayFrom(int64(start)*498+int64(500*time.Hour), start, frozenMargin); p != start {
		t.Errorf("periodAwayFrom(mid-window) = %s, want %s (1000 hours when it is far from a boundary)", p, start)
	}
}
