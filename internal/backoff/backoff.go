// Package backoff is the retry schedule the HTTP and gRPC clients share:
// exponential backoff with full jitter, never earlier than what the server
// asked for, with a cap on attempts and on the total time.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy is a retry schedule. The zero value is usable: it takes the
// defaults below.
type Policy struct {
	// Base is the first backoff ceiling; attempt n draws from
	// [0, min(Max, Base·2ⁿ)). Default 100 ms.
	Base time.Duration
	// Max caps one backoff ceiling. Default 10 s.
	Max time.Duration
	// Attempts is the most attempts in all, the first included. Default 4.
	Attempts int
	// Total caps the time from the first attempt to the start of the last.
	// Default 30 s. A retry whose wait would end past it is not made.
	Total time.Duration
	// Jitter draws a uniform duration in [0, n); nil uses math/rand/v2.
	// Tests replace it to pin the schedule.
	Jitter func(n time.Duration) time.Duration
}

const (
	defaultBase     = 100 * time.Millisecond
	defaultMax      = 10 * time.Second
	defaultAttempts = 4
	defaultTotal    = 30 * time.Second
)

// WithDefaults returns p with zero fields set to their defaults.
func (p Policy) WithDefaults() Policy {
	if p.Base <= 0 {
		p.Base = defaultBase
	}
	if p.Max <= 0 {
		p.Max = defaultMax
	}
	if p.Attempts <= 0 {
		p.Attempts = defaultAttempts
	}
	if p.Total <= 0 {
		p.Total = defaultTotal
	}
	return p
}

// Delay returns the wait before retry number retry (0 for the first
// retry, after the first attempt): a full-jitter draw from
// [0, min(Max, Base·2^retry)), raised to floor, the server's own
// Retry-After, so a retry is never earlier than asked. p must have its
// defaults set.
func (p Policy) Delay(retry int, floor time.Duration) time.Duration {
	ceiling := p.Max
	if retry < 62 {
		if c := p.Base << retry; c > 0 && c < ceiling {
			ceiling = c
		}
	}
	var d time.Duration
	if p.Jitter != nil {
		d = p.Jitter(ceiling)
	} else {
		d = rand.N(ceiling)
	}
	// Past the server's floor the jitter still spreads clients that were
	// all told the same moment.
	if floor > 0 {
		d += floor
	}
	return d
}

// Next reports whether another attempt may follow attempt number attempt
// (1 for the first) started at start, given the server's floor, and how
// long to wait first. It is false when the attempts are spent, or the
// wait would end past the Total budget or ctx's deadline.
func (p Policy) Next(ctx context.Context, start time.Time, attempt int, floor time.Duration) (time.Duration, bool) {
	if attempt >= p.Attempts {
		return 0, false
	}
	d := p.Delay(attempt-1, floor)
	end := time.Now().Add(d)
	if end.After(start.Add(p.Total)) {
		return 0, false
	}
	if dl, ok := ctx.Deadline(); ok && end.After(dl) {
		return 0, false
	}
	return d, true
}

// Sleep waits d or until ctx ends, returning ctx's error in that case.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
