package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
	"go.uber.org/goleak"
)

// downTimeout bounds each call while the server is down; a call must
// return within it plus downSlack.
const (
	downTimeout  = 2 * time.Second
	downSlack    = 3 * time.Second
	recoverLimit = 60 * time.Second
)

// testStoreDown stops the server under an open store and checks that
// every call fails fast with ErrUnavailable or ErrUnknownOutcome, that the
// same store recovers once the server is back, and that closing it leaves
// no goroutine behind.
func (s *suite) testStoreDown(t *testing.T) {
	if s.h.Stop == nil {
		t.Skip("storetest: Harness.Stop/Start not set: store-down checks skipped")
	}
	r := s.rng()
	s.startClock()
	leakOpts := []goleak.Option{goleak.IgnoreCurrent()}
	st := s.newStore(t)
	closed := false
	defer func() {
		if !closed {
			_ = st.Close()
		}
	}()
	alg := s.h.Algorithms[0]
	c := ratelimit.Check{Key: newKey(t, r, "down"), Algorithm: alg, Limit: s.frozen(10), Cost: 1}
	s.mustApply(t, st, c)

	s.h.Stop(t)
	started := false
	defer func() {
		if !started {
			s.h.Start(t)
		}
	}()
	for _, call := range []struct {
		name string
		fn   func(ctx context.Context) error
	}{
		{"Apply", func(ctx context.Context) error { _, err := st.Apply(ctx, c); return err }},
		{"ApplyAll", func(ctx context.Context) error {
			_, err := st.ApplyAll(ctx, []ratelimit.Check{c, c}, make([]ratelimit.Outcome, 2))
			return err
		}},
		{"Reset", func(ctx context.Context) error { return st.Reset(ctx, c.Namespace, c.Key) }},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), downTimeout)
		begin := time.Now()
		err := call.fn(ctx)
		took := time.Since(begin)
		cancel()
		switch {
		case err == nil:
			t.Errorf("%s with the server down: no error", call.name)
		case !typedStoreErr(err):
			t.Errorf("%s with the server down: %v, want an error wrapping ErrUnavailable or ErrUnknownOutcome", call.name, err)
		}
		if took > downTimeout+downSlack {
			t.Errorf("%s with the server down took %s with a %s deadline: the deadline was not honoured", call.name, took, downTimeout)
		}
	}

	s.h.Start(t)
	started = true
	deadline := time.Now().Add(recoverLimit)
	var lastErr error
	for {
		ctx, cancel := context.WithTimeout(t.Context(), downTimeout)
		_, lastErr = st.Apply(ctx, c)
		cancel()
		if lastErr == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store did not recover within %s of the server's return: %v", recoverLimit, lastErr)
		}
		time.Sleep(50 * time.Millisecond) // polling a real server's recovery
	}
	closed = true
	if err := st.Close(); err != nil {
		t.Errorf("Close after recovery: %v", err)
	}
	if err := goleak.Find(leakOpts...); err != nil {
		t.Errorf("goroutines left after the store was closed: %v", err)
	}
}
