package fakeclock_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/fakeclock"
)

func TestAdvance(t *testing.T) {
	var clk ratelimit.Clock = fakeclock.New()
	c := clk.(*fakeclock.Clock)
	if got := c.Now(); got != fakeclock.Start.UnixNano() {
		t.Fatalf("Now = %d, want Start %d", got, fakeclock.Start.UnixNano())
	}
	c.Advance(time.Minute)
	c.Advance(-time.Second)
	if got, want := c.Now(), fakeclock.Start.Add(59*time.Second).UnixNano(); got != want {
		t.Fatalf("Now after +1m -1s = %d, want %d", got, want)
	}
}
