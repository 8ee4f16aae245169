package storetest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/conformance/storetest"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// brokenEnv selects, in a child test binary, which broken store
// TestBrokenStore runs the suite on.
const brokenEnv = "STORETEST_BROKEN"

// overAdmitting lies once per key under contention: the first denial that
// happens while another call is in flight is reported as allowed, so the
// store admits one unit more than the limit.
type overAdmitting struct {
	ratelimit.Store
	inFlight *atomic.Int32
	mu       *sync.Mutex
	lied     map[string]bool
}

func (s overAdmitting) Apply(ctx context.Context, c ratelimit.Check) (ratelimit.Outcome, error) {
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	o, err := s.Store.Apply(ctx, c)
	if err == nil && !o.Allowed && c.Cost > 0 && s.inFlight.Load() > 1 {
		s.mu.Lock()
		if !s.lied[c.Key] {
			s.lied[c.Key] = true
			o.Allowed, o.RetryAfter = true, 0
		}
		s.mu.Unlock()
	}
	return o, err
}

// leakyComposite spends the allowed checks of a denied composite.
type leakyComposite struct{ ratelimit.Store }

func (s leakyComposite) ApplyAll(ctx context.Context, checks []ratelimit.Check, out []ratelimit.Outcome) (bool, error) {
	ok, err := s.Store.ApplyAll(ctx, checks, out)
	if err == nil && !ok {
		for i, c := range checks {
			if out[i].Allowed {
				_, _ = s.Apply(ctx, c)
			}
		}
	}
	return ok, err
}

// TestBrokenStore runs the suite on a deliberately broken store; it only
// runs as the child process of TestSuiteBites.
func TestBrokenStore(t *testing.T) {
	mode := os.Getenv(brokenEnv)
	if mode == "" {
		t.Skip("runs only as the child of TestSuiteBites")
	}
	h := memoryHarness(t, storetest.NewClock(time.Unix(0, 0)))
	shared := h.NewStore
	switch mode {
	case "overadmit":
		inFlight, mu, lied := new(atomic.Int32), new(sync.Mutex), map[string]bool{}
		h.NewStore = func(t *testing.T) ratelimit.Store {
			return overAdmitting{Store: shared(t), inFlight: inFlight, mu: mu, lied: lied}
		}
	case "composite":
		h.NewStore = func(t *testing.T) ratelimit.Store { return leakyComposite{shared(t)} }
	default:
		t.Fatalf("unknown %s=%q", brokenEnv, mode)
	}
	storetest.Run(t, h)
}

// TestSuiteBites proves the suite fails a store that over-admits by one
// under contention, and one that consumes on a denied composite, with a
// message naming the fault.
func TestSuiteBites(t *testing.T) {
	if os.Getenv(brokenEnv) != "" {
		t.Skip("already the child")
	}
	for _, tc := range []struct {
		mode string
		// anyOf lists failure lines one of which must appear: the lie
		// happens at a random moment of contention, which the exact count
		// or the linearizability check catches.
		anyOf []string
	}{
		{"overadmit", []string{"calls allowed on one key of burst 100 from 4 clients, want exactly 100", "is not linearizable"}},
		{"composite", []string{"a denied composite consumed"}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestBrokenStore$", "-test.v")
			cmd.Env = append(os.Environ(), brokenEnv+"="+tc.mode)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a store broken with %q:\n%s", tc.mode, out)
			}
			found := false
			for _, want := range tc.anyOf {
				found = found || strings.Contains(string(out), want)
			}
			if !found {
				t.Errorf("the suite's output for %q has none of %q:\n%s", tc.mode, tc.anyOf, lastLines(string(out), 40))
			}
		})
	}
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
