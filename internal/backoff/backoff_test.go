package backoff

import (
	"context"
	"testing"
	"time"
)

func TestDelayBounds(t *testing.T) {
	p := Policy{Base: 100 * time.Millisecond, Max: time.Second}.WithDefaults()
	for retry := range 70 {
		ceiling := time.Second
		if retry < 4 {
			ceiling = 100 * time.Millisecond << retry
		}
		for range 200 {
			d := p.Delay(retry, 2*time.Second)
			if d < 2*time.Second || d >= 2*time.Second+ceiling {
				t.Fatalf("retry %d: delay %s outside [2s, 2s+%s)", retry, d, ceiling)
			}
		}
	}
}

func TestNextStops(t *testing.T) {
	p := Policy{Attempts: 3, Total: 10 * time.Second, Jitter: func(time.Duration) time.Duration { return 0 }}.WithDefaults()
	start := time.Now()
	ctx := context.Background()
	if d, ok := p.Next(ctx, start, 1, time.Second); !ok || d != time.Second {
		t.Errorf("after attempt 1: %s %v, want 1s true", d, ok)
	}
	if _, ok := p.Next(ctx, start, 3, 0); ok {
		t.Error("a retry after the last attempt")
	}
	if _, ok := p.Next(ctx, start, 1, time.Minute); ok {
		t.Error("a retry past the total budget")
	}
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, ok := p.Next(dctx, start, 1, 2*time.Second); ok {
		t.Error("a retry past the context's deadline")
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); err == nil {
		t.Error("Sleep on a cancelled context returned nil")
	}
}
