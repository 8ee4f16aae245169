package window_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/window"
)

func TestOf(t *testing.T) {
	for _, tt := range []struct {
		in, want ratelimit.Limit
	}{
		{ratelimit.PerMinute(100), ratelimit.PerMinute(100)},
		{ratelimit.PerMinute(100).WithBurst(200), ratelimit.Every(2*time.Minute, 200)},
		{ratelimit.PerSecond(4).WithBurst(2), ratelimit.Every(500*time.Millisecond, 2)},
		{ratelimit.Limit{Count: 3, Period: 10, Burst: 2}, ratelimit.Every(7, 2)}, // 20/3 ns, rounded up
	} {
		got := window.Of(tt.in)
		if got != tt.want || window.Of(got) != got {
			t.Errorf("Of(%s) = %s (again: %s), want %s", tt.in, got, window.Of(got), tt.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, l := range []ratelimit.Limit{
		ratelimit.PerMinute(100).WithBurst(200),
		ratelimit.PerSecond(4).WithBurst(2),
		{Count: ratelimit.MaxCount, Period: ratelimit.MaxPeriod, Burst: ratelimit.MaxCount},
	} {
		if err := window.Validate("w", l); err != nil {
			t.Errorf("Validate(%s) = %v, want nil", l, err)
		}
	}
	for _, tt := range []struct {
		l         ratelimit.Limit
		suggested int64
	}{
		{ratelimit.Limit{Count: 7, Period: 3 * time.Second, Burst: 1}, 7},
		{ratelimit.Limit{Count: 3, Period: 10, Burst: 2}, 3},
		{ratelimit.Limit{Count: 6, Period: 4, Burst: 5}, 6},
	} {
		err := window.Validate("w", tt.l)
		if !errors.Is(err, ratelimit.ErrInvalidLimit) {
			t.Fatalf("Validate(%s) = %v, want ErrInvalidLimit", tt.l, err)
		}
		// The suggested burst makes the window whole.
		if err := window.Validate("w", tt.l.WithBurst(tt.suggested)); err != nil {
			t.Errorf("Validate(%s) refused the burst %d its message suggests (%v)", tt.l, tt.suggested, err)
		}
	}
}
