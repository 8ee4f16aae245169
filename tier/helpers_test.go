package tier

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// backing is a shared exact store that several tier Stores use as if each
// had its own connection: Close is a no-op, calls are counted, and it can
// be made to fail.
type backing struct {
	ratelimit.Store
	calls   atomic.Int64
	refunds atomic.Int64
	down    atomic.Bool
	delay   atomic.Int64 // ns each call waits (honouring its context)
}

var errDown = fmt.Errorf("%w: test backing is down", ratelimit.ErrUnavailable)

func newBacking(t *testing.T, clock ratelimit.Clock) *backing {
	t.Helper()
	opts := []memstore.Option{}
	if clock != nil {
		opts = append(opts, memstore.WithClock(clock))
	}
	m, err := memstore.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return &backing{Store: m}
}

func (b *backing) wait(ctx context.Context) error {
	if d := b.delay.Load(); d > 0 {
		select {
		case <-time.After(time.Duration(d)):
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ratelimit.ErrUnknownOutcome, ctx.Err())
		}
	}
	if b.down.Load() {
		return errDown
	}
	return nil
}

func (b *backing) Apply(ctx context.Context, c ratelimit.Check) (ratelimit.Outcome, error) {
	b.calls.Add(1)
	if err := b.wait(ctx); err != nil {
		return ratelimit.Outcome{}, err
	}
	if c.Op == ratelimit.OpRefund {
		b.refunds.Add(c.Cost)
	}
	return b.Store.Apply(ctx, c)
}

func (b *backing) ApplyAll(ctx context.Context, cs []ratelimit.Check, out []ratelimit.Outcome) (bool, error) {
	b.calls.Add(1)
	if err := b.wait(ctx); err != nil {
		return false, err
	}
	return b.Store.ApplyAll(ctx, cs, out)
}

func (b *backing) Close() error { return nil }

// level peeks the backing store's remaining units of key.
func (b *backing) level(t *testing.T, c ratelimit.Check) int64 {
	t.Helper()
	c.Cost, c.Op = 0, ratelimit.OpTake
	o, err := b.Store.Apply(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	return o.Remaining
}

func newTier(t *testing.T, b ratelimit.Store, opts ...Option) *Store {
	t.Helper()
	s, err := New(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// events records a Store's events by kind.
type events struct {
	mu sync.Mutex
	n  map[EventKind]int64
}

func (e *events) observe(ev Event) {
	e.mu.Lock()
	if e.n == nil {
		e.n = map[EventKind]int64{}
	}
	e.n[ev.Kind]++
	e.mu.Unlock()
}

func (e *events) count(k EventKind) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[k]
}

func isUnavailable(err error) bool { return errors.Is(err, ratelimit.ErrUnavailable) }

func contextWithTimeout(t *testing.T, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), d)
}

func newBackingB(b *testing.B) ratelimit.Store {
	m, err := memstore.New()
	if err != nil {
		b.Fatal(err)
	}
	return m
}
