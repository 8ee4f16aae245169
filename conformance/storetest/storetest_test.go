package storetest_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/conformance/internal/testalg"
	"github.com/sluicehq/sluice/conformance/storetest"
	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// switchable makes a store look like a server that can be stopped: while
// down, every call fails with ErrUnavailable.
type switchable struct {
	ratelimit.Store
	down *atomic.Bool
}

func (s switchable) err() error {
	if s.down.Load() {
		return fmt.Errorf("switchable: server stopped: %w", ratelimit.ErrUnavailable)
	}
	return nil
}

func (s switchable) Apply(ctx context.Context, c ratelimit.Check) (ratelimit.Outcome, error) {
	if err := s.err(); err != nil {
		return ratelimit.Outcome{}, err
	}
	return s.Store.Apply(ctx, c)
}

func (s switchable) ApplyAll(ctx context.Context, checks []ratelimit.Check, out []ratelimit.Outcome) (bool, error) {
	if err := s.err(); err != nil {
		return false, err
	}
	return s.Store.ApplyAll(ctx, checks, out)
}

func (s switchable) Reset(ctx context.Context, namespace, key string) error {
	if err := s.err(); err != nil {
		return err
	}
	return s.Store.Reset(ctx, namespace, key)
}

// memoryHarness returns a harness over one MemoryStore reading clk (the
// wall clock when nil), closed when t ends.
func memoryHarness(t *testing.T, clk *storetest.Clock) storetest.Harness {
	var opts []memstore.Option
	if clk != nil {
		opts = append(opts, memstore.WithClock(clk))
	}
	mem, err := memstore.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mem.Close() })
	return storetest.Harness{NewStore: storetest.Shared(mem), Clock: clk, Algorithms: algorithms()}
}

// algorithms is every in-repo algorithm plus the suite's own test window.
func algorithms() []ratelimit.Algorithm {
	return append(storetest.DefaultAlgorithms(), testalg.Window{})
}

// TestMemoryStore runs the suite on the embedded store with an injected
// clock, so whole outcomes are compared at fixed instants, and with a
// simulated outage for the store-down checks.
func TestMemoryStore(t *testing.T) {
	h := memoryHarness(t, storetest.NewClock(time.Unix(0, 0)))
	var down atomic.Bool
	shared := h.NewStore
	h.NewStore = func(t *testing.T) ratelimit.Store { return switchable{Store: shared(t), down: &down} }
	h.Stop = func(*testing.T) { down.Store(true) }
	h.Start = func(*testing.T) { down.Store(false) }
	storetest.Run(t, h)
}

// TestMemoryStoreWallClock runs the suite on the embedded store reading
// the wall clock, the way it checks a store with a server clock.
func TestMemoryStoreWallClock(t *testing.T) {
	storetest.Run(t, memoryHarness(t, nil))
}

// TestMemoryStoreApproximate runs the suite's approximate mode, as a gossip
// cluster would declare it, on the exact embedded store: an exact store
// is within any bound.
func TestMemoryStoreApproximate(t *testing.T) {
	h := memoryHarness(t, storetest.NewClock(time.Unix(0, 0)))
	h.Approximate = func(l ratelimit.Limit, stores int) storetest.Bound {
		return storetest.Bound{Under: 1, Over: int64(stores)}
	}
	storetest.Run(t, h)
}
