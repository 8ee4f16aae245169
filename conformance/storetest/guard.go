package storetest

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/keyfmt"
)

// defaultCallTimeout is the deadline of each store call when
// Harness.CallTimeout is zero.
const defaultCallTimeout = 30 * time.Second

// errStoreBroken marks a call the suite gave up on: the store hung past the
// watchdog or panicked. The check that made the call has already failed.
var errStoreBroken = errors.New("storetest: broken store")

// callTimeout is the deadline the suite gives each store call.
func (s *suite) callTimeout() time.Duration {
	if s.h.CallTimeout > 0 {
		return s.h.CallTimeout
	}
	return defaultCallTimeout
}

// watchdog is how long a store call may take before the suite abandons it
// as hung: its deadline plus half as much again, time enough for a store
// that honours its context to notice and return.
func (s *suite) watchdog() time.Duration {
	d := s.callTimeout()
	return d + d/2
}

// checkState is what the guarded stores of one check share: the first
// hang, after which their calls fail at once instead of waiting for the
// watchdog again (a stuck store stays stuck).
type checkState struct {
	hung atomic.Pointer[string]
}

// stateOf returns the state shared by the stores of check t.
func (s *suite) stateOf(t *testing.T) *checkState {
	v, _ := s.checks.LoadOrStore(t, &checkState{})
	return v.(*checkState)
}

// newStore calls Harness.NewStore and wraps the store so that every call
// the suite makes through it goes through guard. A panic in NewStore fails
// the check instead of the test binary. The caller closes the store.
func (s *suite) newStore(t *testing.T) ratelimit.Store {
	t.Helper()
	var st ratelimit.Store
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("storetest: Harness.NewStore panicked: %v\n%s", p, debug.Stack())
			}
		}()
		st = s.h.NewStore(t)
	}()
	if st == nil {
		t.Fatal("storetest: NewStore returned nil")
	}
	return &guarded{st: st, t: t, s: s, state: s.stateOf(t)}
}

// guarded is a store under test as the suite sees it: each call runs
// through guard.
type guarded struct {
	st    ratelimit.Store
	t     *testing.T // the check that got the store, failed by a hang or a panic
	s     *suite
	state *checkState
}

// Apply runs Store.Apply through guard.
func (g *guarded) Apply(ctx context.Context, c ratelimit.Check) (ratelimit.Outcome, error) {
	return guard(ctx, g, func() string { return "Apply(" + describe(c) + ")" },
		func(ctx context.Context) (ratelimit.Outcome, error) { return g.st.Apply(ctx, c) })
}

// ApplyAll runs Store.ApplyAll through guard. The store writes into a
// copy of out, copied back when it returns, so that a call abandoned as
// hung never writes into memory the check still reads.
func (g *guarded) ApplyAll(ctx context.Context, checks []ratelimit.Check, out []ratelimit.Outcome) (bool, error) {
	type result struct {
		ok  bool
		out []ratelimit.Outcome
	}
	checks = append([]ratelimit.Check(nil), checks...)
	r, err := guard(ctx, g, func() string {
		return fmt.Sprintf("ApplyAll(%d checks, the first %s)", len(checks), firstCheck(checks))
	},
		func(ctx context.Context) (result, error) {
			own := make([]ratelimit.Outcome, len(out))
			ok, err := g.st.ApplyAll(ctx, checks, own)
			return result{ok, own}, err
		})
	copy(out, r.out)
	return r.ok, err
}

// deadlineApplier returns the store under test as a
// ratelimit.DeadlineApplier whose calls run through guard, or nil when it
// lacks the capability.
func (g *guarded) deadlineApplier() ratelimit.DeadlineApplier {
	d, ok := g.st.(ratelimit.DeadlineApplier)
	if !ok {
		return nil
	}
	return guardedDeadline{g, d}
}

// guardedDeadline runs a ratelimit.DeadlineApplier's calls through guard.
type guardedDeadline struct {
	g *guarded
	d ratelimit.DeadlineApplier
}

func (gd guardedDeadline) ApplyBefore(ctx context.Context, deadline time.Time, c ratelimit.Check) (ratelimit.Outcome, error) {
	return guard(ctx, gd.g, func() string { return "ApplyBefore(" + describe(c) + ")" },
		func(ctx context.Context) (ratelimit.Outcome, error) { return gd.d.ApplyBefore(ctx, deadline, c) })
}

func (gd guardedDeadline) ApplyAllBefore(ctx context.Context, deadline time.Time, checks []ratelimit.Check, out []ratelimit.Outcome) (bool, error) {
	checks = append([]ratelimit.Check(nil), checks...)
	own := make([]ratelimit.Outcome, len(out))
	ok, err := guard(ctx, gd.g, func() string {
		return fmt.Sprintf("ApplyAllBefore(%d checks, the first %s)", len(checks), firstCheck(checks))
	},
		func(ctx context.Context) (bool, error) { return gd.d.ApplyAllBefore(ctx, deadline, checks, own) })
	if err == nil {
		copy(out, own)
	}
	return ok, err
}

// Reset runs Store.Reset through guard.
func (g *guarded) Reset(ctx context.Context, namespace, key string) error {
	_, err := guard(ctx, g, func() string { return fmt.Sprintf("Reset(ns=%s key=%s)", keyfmt.Quote(namespace), keyfmt.Quote(key)) },
		func(ctx context.Context) (struct{}, error) { return struct{}{}, g.st.Reset(ctx, namespace, key) })
	return err
}

// Close runs Store.Close through guard, with no deadline of its own.
func (g *guarded) Close() error {
	_, err := guard(context.Background(), g, func() string { return "Close()" },
		func(context.Context) (struct{}, error) { return struct{}{}, g.st.Close() })
	return err
}

// guard is the one way the suite calls a store: it runs call on a
// goroutine of its own with ctx (the caller's deadline) and waits at most
// the watchdog for it. A call still running then is abandoned and fails
// the check ("store hung"), as does a panic inside the store, recovered
// with its value and stack; neither stops the test binary, and the other
// checks still run. Once a store of a check has hung, the check's later
// calls fail at once. what names the call in messages.
func guard[T any](ctx context.Context, g *guarded, what func() string, call func(context.Context) (T, error)) (T, error) {
	var zero T
	if first := g.state.hung.Load(); first != nil {
		return zero, fmt.Errorf("%w: not called, since %s", errStoreBroken, *first)
	}
	type result struct {
		v     T
		err   error
		panic any
		stack []byte
	}
	done := make(chan result, 1) // buffered: an abandoned call still finishes its send
	go func() {
		var r result
		defer func() {
			if p := recover(); p != nil {
				r = result{panic: p, stack: debug.Stack()}
			}
			done <- r
		}()
		r.v, r.err = call(ctx)
	}()
	limit := g.s.watchdog()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case r := <-done:
		if r.panic != nil {
			msg := fmt.Sprintf("store panicked: %s: %v", what(), r.panic)
			g.t.Errorf("%s\n%s", msg, r.stack)
			return zero, fmt.Errorf("%w: %s", errStoreBroken, msg)
		}
		return r.v, r.err
	case <-timer.C:
		msg := fmt.Sprintf("store hung: %s did not return within %s", what(), limit)
		if g.state.hung.CompareAndSwap(nil, &msg) {
			g.t.Error(msg)
		}
		return zero, fmt.Errorf("%w: %s", errStoreBroken, msg)
	}
}

// firstCheck describes the first of checks, if any.
func firstCheck(checks []ratelimit.Check) string {
	if len(checks) == 0 {
		return "<none>"
	}
	return describe(checks[0])
}
