package storetest_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/conformance/internal/testalg"
	"github.com/sluicehq/sluice/conformance/storetest"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// shared is one MemoryStore seen through independent handles, the way
// separate clients see one Redis server. down simulates the server being
// unreachable.
type shared struct {
	mem  *ratelimit.MemoryStore
	down atomic.Bool
}

// handle is one client of a shared store: closing it closes only the
// handle.
type handle struct {
	s      *shared
	closed atomic.Bool
}

func (h *handle) check(ctx context.Context) error {
	if h.closed.Load() {
		return ratelimit.ErrClosed
	}
	if h.s.down.Load() {
		return fmt.Errorf("test handle: server stopped: %w", ratelimit.ErrUnavailable)
	}
	return nil
}

func (h *handle) Apply(ctx context.Context, c ratelimit.Check) (ratelimit.Outcome, error) {
	if err := h.check(ctx); err != nil {
		return ratelimit.Outcome{}, err
	}
	return h.s.mem.Apply(ctx, c)
}

func (h *handle) ApplyAll(ctx context.Context, checks []ratelimit.Check, out []ratelimit.Outcome) (bool, error) {
	if err := h.check(ctx); err != nil {
		return false, err
	}
	return h.s.mem.ApplyAll(ctx, checks, out)
}

func (h *handle) Reset(ctx context.Context, namespace, key string) error {
	if err := h.check(ctx); err != nil {
		return err
	}
	return h.s.mem.Reset(ctx, namespace, key)
}

func (h *handle) Close() error {
	h.closed.Store(true)
	return nil
}

// memoryHarness returns a harness over one shared MemoryStore reading clk.
func memoryHarness(t *testing.T, clk *storetest.Clock) (storetest.Harness, *shared) {
	var opts []ratelimit.MemoryOption
	if clk != nil {
		opts = append(opts, ratelimit.WithMemoryClock(clk))
	}
	mem, err := ratelimit.NewMemoryStore(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mem.Close() })
	sh := &shared{mem: mem}
	return storetest.Harness{
		NewStore:   func(t *testing.T) ratelimit.Store { return &handle{s: sh} },
		Clock:      clk,
		Algorithms: algorithms(),
	}, sh
}

func algorithms() []ratelimit.Algorithm {
	if all := storetest.DefaultAlgorithms(); len(all) > 0 {
		return all
	}
	return []ratelimit.Algorithm{testalg.Window{}}
}

// TestMemoryStore runs the suite on the embedded store with an injected
// clock, so whole outcomes are compared at fixed instants.
func TestMemoryStore(t *testing.T) {
	h, sh := memoryHarness(t, storetest.NewClock(time.Unix(0, 0)))
	h.Stop = func(*testing.T) { sh.down.Store(true) }
	h.Start = func(*testing.T) { sh.down.Store(false) }
	storetest.Run(t, h)
}

// TestMemoryStoreWallClock runs the suite on the embedded store reading
// the wall clock, the way it checks a store with a server clock.
func TestMemoryStoreWallClock(t *testing.T) {
	h, _ := memoryHarness(t, nil)
	storetest.Run(t, h)
}

// TestMemoryStoreDirect runs the suite on plain MemoryStores, one per
// NewStore call; only the checks that need a single client apply, so it
// runs those by name.
func TestMemoryStoreClose(t *testing.T) {
	st, err := ratelimit.NewMemoryStore()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
