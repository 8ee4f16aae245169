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

	"github.com/sluicehq/sluice/conformance/internal/testalg"
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

// lockPanicking panics while holding the lock its handles share when it
// applies a check on a key of the Peek check; from then on every call
// blocks on that lock for ever, as a contributed store's would.
type lockPanicking struct {
	ratelimit.Store
	mu *sync.Mutex
}

// deliberatePanic is the value lockPanicking panics with.
const deliberatePanic = "deliberate panic holding the lock"

func (s lockPanicking) Apply(ctx context.Context, c ratelimit.Check) (ratelimit.Outcome, error) {
	s.mu.Lock()
	if strings.HasSuffix(c.Key, ":peek") {
		panic(deliberatePanic)
	}
	defer s.mu.Unlock()
	return s.Store.Apply(ctx, c)
}

func (s lockPanicking) ApplyAll(ctx context.Context, checks []ratelimit.Check, out []ratelimit.Outcome) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Store.ApplyAll(ctx, checks, out)
}

func (s lockPanicking) Reset(ctx context.Context, namespace, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Store.Reset(ctx, namespace, key)
}

// compositeBlocking never returns from ApplyAll, whatever its context says.
type compositeBlocking struct{ ratelimit.Store }

func (compositeBlocking) ApplyAll(context.Context, []ratelimit.Check, []ratelimit.Outcome) (bool, error) {
	select {} // blocks for ever, ignoring the context
}

// limitResetting forgets a key's state whenever its limit changes.
type limitResetting struct {
	ratelimit.Store
	mu     *sync.Mutex
	limits map[string]ratelimit.Limit
}

func (s limitResetting) Apply(ctx context.Context, c ratelimit.Check) (ratelimit.Outcome, error) {
	s.mu.Lock()
	last, seen := s.limits[c.Namespace+"\x00"+c.Key]
	s.limits[c.Namespace+"\x00"+c.Key] = c.Limit
	s.mu.Unlock()
	if seen && last != c.Limit {
		if err := s.Reset(ctx, c.Namespace, c.Key); err != nil {
			return ratelimit.Outcome{}, err
		}
	}
	return s.Store.Apply(ctx, c)
}

// deadlineIgnoring offers ratelimit.DeadlineApplier but ignores the
// deadline: a call past it is applied anyway.
type deadlineIgnoring struct{ ratelimit.Store }

func (s deadlineIgnoring) ApplyBefore(ctx context.Context, _ time.Time, c ratelimit.Check) (ratelimit.Outcome, error) {
	return s.Apply(ctx, c)
}

func (s deadlineIgnoring) ApplyAllBefore(ctx context.Context, _ time.Time, checks []ratelimit.Check, out []ratelimit.Outcome) (bool, error) {
	return s.ApplyAll(ctx, checks, out)
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
	case "deadline":
		h.NewStore = func(t *testing.T) ratelimit.Store { return deadlineIgnoring{shared(t)} }
	case "limitreset":
		mu, limits := new(sync.Mutex), map[string]ratelimit.Limit{}
		h.NewStore = func(t *testing.T) ratelimit.Store { return limitResetting{Store: shared(t), mu: mu, limits: limits} }
	case "panic":
		mu := new(sync.Mutex)
		h.NewStore = func(t *testing.T) ratelimit.Store { return lockPanicking{Store: shared(t), mu: mu} }
		h.Algorithms, h.CallTimeout = []ratelimit.Algorithm{testalg.Window{}}, brokenCallTimeout
	case "hang":
		h.NewStore = func(t *testing.T) ratelimit.Store { return compositeBlocking{shared(t)} }
		h.Algorithms, h.CallTimeout = []ratelimit.Algorithm{testalg.Window{}}, brokenCallTimeout
	default:
		t.Fatalf("unknown %s=%q", brokenEnv, mode)
	}
	storetest.Run(t, h)
}

// brokenCallTimeout is the call deadline of the hanging stores' runs: the
// watchdog gives up on a call after 1.5 times as long.
const brokenCallTimeout = 200 * time.Millisecond

// TestSuiteBites proves the suite fails a store that over-admits by one
// under contention, one that consumes on a denied composite, one that
// resets a key when its limit changes and one that applies calls past
// the deadline given as a value, with a message naming the fault;
// and that a store that panics while holding its lock, or blocks for ever
// in ApplyAll, fails the checks that meet it, in bounded time, while the
// other checks still run and pass.
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
		// allOf lists lines that must all appear.
		allOf []string
	}{
		{mode: "overadmit", anyOf: []string{"calls allowed on one key of burst 100 from 4 clients, want exactly 100", "is not linearizable"}},
		{mode: "composite", anyOf: []string{"a denied composite consumed"}},
		{mode: "deadline", allOf: []string{"ApplyBefore a passed deadline: <nil>", "--- FAIL: TestBrokenStore/Context/DeadlineValue"}},
		{mode: "limitreset", allOf: []string{"the change gave a fresh burst", "did not carry the key's state over the change"}},
		{mode: "panic", allOf: []string{
			"--- PASS: TestBrokenStore/Sequential",
			"--- PASS: TestBrokenStore/Isolation",
			"--- FAIL: TestBrokenStore/Peek",
			"store panicked: Apply(take ns=\"\" key=\"storetest:",
			deliberatePanic,
			"--- FAIL: TestBrokenStore/TTL",
			"store hung: Apply(",
			"did not return within 300ms",
			"--- SKIP: TestBrokenStore/StoreDown",
		}},
		{mode: "hang", allOf: []string{
			"--- FAIL: TestBrokenStore/Composite",
			"store hung: ApplyAll(2 checks, the first take ns=\"wide\"",
			"did not return within 300ms",
			"--- PASS: TestBrokenStore/Sequential",
			"--- PASS: TestBrokenStore/Peek",
			"--- PASS: TestBrokenStore/TTL",
			"--- FAIL: TestBrokenStore/BadInput",
		}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestBrokenStore$", "-test.v")
			cmd.Env = append(os.Environ(), brokenEnv+"="+tc.mode)
			begin := time.Now()
			out, err := cmd.CombinedOutput()
			took := time.Since(begin)
			if err == nil {
				t.Fatalf("the suite passed a store broken with %q:\n%s", tc.mode, out)
			}
			if ctx.Err() != nil {
				t.Fatalf("the suite on a store broken with %q did not finish within %s:\n%s", tc.mode, took, lastLines(string(out), 40))
			}
			if strings.Contains(string(out), "panic: ") {
				t.Errorf("the test binary crashed on a store broken with %q:\n%s", tc.mode, lastLines(string(out), 40))
			}
			t.Logf("the suite failed a store broken with %q in %s", tc.mode, took.Round(time.Millisecond))
			found := len(tc.anyOf) == 0
			for _, want := range tc.anyOf {
				found = found || strings.Contains(string(out), want)
			}
			if !found {
				t.Errorf("the suite's output for %q has none of %q:\n%s", tc.mode, tc.anyOf, lastLines(string(out), 40))
			}
			for _, want := range tc.allOf {
				if !strings.Contains(string(out), want) {
					t.Errorf("the suite's output for %q lacks %q:\n%s", tc.mode, want, lastLines(string(out), 60))
				}
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
