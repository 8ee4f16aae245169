package ratelimit_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/arith"
	"github.com/sluicehq/sluice/internal/muldiv"
)

func TestLimitValidate(t *testing.T) {
	tests := []struct {
		name string
		l    ratelimit.Limit
		ok   bool
	}{
		{"per second", ratelimit.PerSecond(10), true},
		{"with burst", ratelimit.PerMinute(60).WithBurst(100), true},
		{"zero", ratelimit.Limit{}, false},
		{"negative count", ratelimit.Limit{Count: -1, Period: time.Second, Burst: 1}, false},
		{"negative period", ratelimit.Limit{Count: 1, Period: -time.Second, Burst: 1}, false},
		{"zero burst", ratelimit.PerSecond(10).WithBurst(0), false},
		{"negative burst", ratelimit.PerSecond(10).WithBurst(-5), false},
		{"count too large", ratelimit.PerSecond(math.MaxInt64), false},
		{"burst too large", ratelimit.PerSecond(1).WithBurst(math.MaxInt64), false},
		{"period too long", ratelimit.Every(ratelimit.MaxPeriod+1, 1), false},
		{"max period", ratelimit.Every(ratelimit.MaxPeriod, 1), true},
		{"fill time too long", ratelimit.Every(ratelimit.MaxPeriod, 1).WithBurst(20), false},
		{"one per nanosecond", ratelimit.Every(time.Nanosecond, 1), true},
		{"max count", ratelimit.Every(time.Nanosecond, ratelimit.MaxCount), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.l.Validate()
			if tt.ok && err != nil {
				t.Fatalf("Validate(%v) = %v, want nil", tt.l, err)
			}
			if !tt.ok && !errors.Is(err, ratelimit.ErrInvalidLimit) {
				t.Fatalf("Validate(%v) = %v, want ErrInvalidLimit", tt.l, err)
			}
		})
	}
}

func TestMulDiv(t *testing.T) {
	tests := []struct {
		a, b, c     int64
		floor, ceil int64
	}{
		{1, 1, 1, 1, 1},
		{10, 1e9, 3, 3333333333, 3333333334},
		{0, 5, 7, 0, 0},
		{math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64},
		{math.MaxInt64, 2, 1, math.MaxInt64, math.MaxInt64},
		{1 << 40, 1 << 40, 1 << 20, 1 << 60, 1 << 60},
	}
	for _, tt := range tests {
		if got := muldiv.Floor(tt.a, tt.b, tt.c); got != tt.floor {
			t.Errorf("MulDivFloor(%d,%d,%d) = %d, want %d", tt.a, tt.b, tt.c, got, tt.floor)
		}
		if got := int64(arith.MulDivCeil(tt.a, tt.b, tt.c)); got != tt.ceil {
			t.Errorf("MulDivCeil(%d,%d,%d) = %d, want %d", tt.a, tt.b, tt.c, got, tt.ceil)
		}
	}
}

func TestLimitString(t *testing.T) {
	if got, want := ratelimit.PerSecond(10).WithBurst(20).String(), "10/1s burst 20"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
}

func TestMaxDebt(t *testing.T) {
	if d := arith.MaxDebt(ratelimit.Limit{Count: 1, Period: ratelimit.MaxPeriod, Burst: 1}); d != 10 {
		t.Fatalf("MaxDebt(1 per 10 years) = %d, want 10", d)
	}
	if d := arith.MaxDebt(ratelimit.PerSecond(1 << 40)); d != 1<<50 {
		t.Fatalf("MaxDebt(2^40/s) = %d, want 2^50", d)
	}
}
