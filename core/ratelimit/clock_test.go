package ratelimit_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

func TestSystemClockTracksWallTimeAndNeverGoesBack(t *testing.T) {
	var c ratelimit.SystemClock
	prev := c.Now()
	for range 10000 {
		now := c.Now()
		if now < prev {
			t.Fatalf("SystemClock went back from %d to %d", prev, now)
		}
		prev = now
	}
	// Without a wall-clock step since process start, the two agree closely.
	if d := time.Duration(c.Now() - time.Now().UnixNano()); d < -time.Second || d > time.Second {
		t.Fatalf("SystemClock is %s away from time.Now", d)
	}
}
