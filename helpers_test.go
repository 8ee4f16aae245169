package sluice_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// clockedStore returns a private memory store reading clk.
func clockedStore(t testing.TB, clk ratelimit.Clock) *memstore.Store {
	t.Helper()
	st, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// newLimiter returns a GCRA limiter named "api" under l.
func newLimiter(t testing.TB, l sluice.Limit, opts ...sluice.Option) *sluice.Limiter {
	t.Helper()
	lim, err := sluice.New(sluice.Rule{Name: "api", Algorithm: gcra.New(), Limit: l}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// failing is a store that is always down.
type failing struct{ err error }

func (f failing) Apply(context.Context, ratelimit.Check) (ratelimit.Outcome, error) {
	return ratelimit.Outcome{}, f.err
}
func (f failing) ApplyAll(context.Context, []ratelimit.Check, []ratelimit.Outcome) (bool, error) {
	return false, f.err
}
func (f failing) Reset(context.Context, string, string) error { return f.err }
func (f failing) Close() error                                { return nil }

// stalled is a store that never answers before its context ends, like a
// Redis under CLIENT PAUSE; it reports the context's error as a remote
// store does.
type stalled struct{}

func (stalled) Apply(ctx context.Context, _ ratelimit.Check) (ratelimit.Outcome, error) {
	<-ctx.Done()
	return ratelimit.Outcome{}, ctx.Err()
}
func (stalled) ApplyAll(ctx context.Context, _ []ratelimit.Check, _ []ratelimit.Outcome) (bool, error) {
	<-ctx.Done()
	return false, ctx.Err()
}
func (stalled) Reset(ctx context.Context, _, _ string) error { <-ctx.Done(); return ctx.Err() }
func (stalled) Close() error                                 { return nil }
