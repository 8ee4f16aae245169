package storetest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// Shared returns a Harness.NewStore for a store that lives in the test
// process, such as memstore.Store: every call returns a new handle
// on st, the way separate clients reach one server. Closing a handle
// makes that handle return ErrClosed and leaves st open; the caller
// closes st itself.
func Shared(st ratelimit.Store) func(*testing.T) ratelimit.Store {
	return func(*testing.T) ratelimit.Store { return &handle{st: st} }
}

// handle is one client of a shared in-process store.
type handle struct {
	st     ratelimit.Store
	closed atomic.Bool
}

func (h *handle) open() error {
	if h.closed.Load() {
		return fmt.Errorf("storetest: shared handle: %w", ratelimit.ErrClosed)
	}
	return nil
}

// Apply forwards to the shared store unless the handle is closed.
func (h *handle) Apply(ctx context.Context, c ratelimit.Check) (ratelimit.Outcome, error) {
	if err := h.open(); err != nil {
		return ratelimit.Outcome{}, err
	}
	return h.st.Apply(ctx, c)
}

// ApplyAll forwards to the shared store unless the handle is closed.
func (h *handle) ApplyAll(ctx context.Context, checks []ratelimit.Check, out []ratelimit.Outcome) (bool, error) {
	if err := h.open(); err != nil {
		return false, err
	}
	return h.st.ApplyAll(ctx, checks, out)
}

// Reset forwards to the shared store unless the handle is closed.
func (h *handle) Reset(ctx context.Context, namespace, key string) error {
	if err := h.open(); err != nil {
		return err
	}
	return h.st.Reset(ctx, namespace, key)
}

// Close closes the handle only.
func (h *handle) Close() error {
	h.closed.Store(true)
	return nil
}
