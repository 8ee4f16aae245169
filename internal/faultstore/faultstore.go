// Package faultstore provides, for tests, a ratelimit.Store whose server
// is down: its decisions fail with ratelimit.ErrUnavailable, as a real
// store's do when it cannot connect.
package faultstore

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// ErrDown is what Apply and ApplyAll return while the store is down.
var ErrDown = fmt.Errorf("dial: %w", ratelimit.ErrUnavailable)

// Store forwards to the store it wraps while up and fails every Apply and
// ApplyAll with ErrDown while down. Only the ratelimit.Store methods are
// exposed, not the wrapped store's optional ones. It is safe for
// concurrent use if the wrapped store is.
type Store struct {
	next ratelimit.Store // nil for a store that is always down
	down atomic.Bool
}

// Wrap returns a store that is up and forwards to next until SetDown.
func Wrap(next ratelimit.Store) *Store { return &Store{next: next} }

// Down returns a store that is always down; its Reset and Close do
// nothing.
func Down() *Store {
	s := &Store{}
	s.down.Store(true)
	return s
}

// SetDown takes the store down (true) or brings it back (false). A store
// from Down stays down.
func (s *Store) SetDown(down bool) {
	if s.next != nil {
		s.down.Store(down)
	}
}

// Apply implements ratelimit.Store.
func (s *Store) Apply(ctx context.Context, c ratelimit.Check) (ratelimit.Outcome, error) {
	if s.down.Load() {
		return ratelimit.Outcome{}, ErrDown
	}
	return s.next.Apply(ctx, c)
}

// ApplyAll implements ratelimit.Store.
func (s *Store) ApplyAll(ctx context.Context, cs []ratelimit.Check, out []ratelimit.Outcome) (bool, error) {
	if s.down.Load() {
		return false, ErrDown
	}
	return s.next.ApplyAll(ctx, cs, out)
}

// Reset implements ratelimit.Store: it forwards even while down, so that
// a test can clean up.
func (s *Store) Reset(ctx context.Context, namespace, key string) error {
	if s.next == nil {
		return nil
	}
	return s.next.Reset(ctx, namespace, key)
}

// Close implements ratelimit.Store, closing the wrapped store.
func (s *Store) Close() error {
	if s.next == nil {
		return nil
	}
	return s.next.Close()
}
