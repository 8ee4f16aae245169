package model_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/model"
)

func TestExactAdmits(t *testing.T) {
	l := ratelimit.Limit{Count: 10, Period: time.Second, Burst: 2}
	// Unsorted on purpose: 4 requests at 0 (2 admitted), one at 50 ms (no
	// token yet: 0.5), one at 150 ms (1.5 tokens), one at 1 s (the burst).
	at := []time.Duration{time.Second, 0, 0, 50 * time.Millisecond, 0, 0, 150 * time.Millisecond}
	if got := model.ExactAdmits(l, at); got != 4 {
		t.Fatalf("ExactAdmits = %d, want 4", got)
	}
}
