package ratelimit

import "context"

// Observer receives every decision a Limiter makes, for metrics and audit
// logs. Observe is called synchronously on the caller's goroutine after the
// decision, so it must be fast and must not block; it must be safe for
// concurrent use. err is the store error, if any (a decision made by the
// failure policy has Decision.ByPolicy set and a non-nil err).
type Observer interface {
	Observe(ctx context.Context, key string, d Decision, err error)
}

// ObserverFunc adapts a function to the Observer interface.
type ObserverFunc func(ctx context.Context, key string, d Decision, err error)

// Observe calls f.
func (f ObserverFunc) Observe(ctx context.Context, key string, d Decision, err error) {
	f(ctx, key, d, err)
}
