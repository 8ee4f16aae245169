package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/keyfmt"
)

// Harness describes the store under test. Only NewStore is required; every
// other field unlocks more checks or adjusts them, and its zero value is the
// conservative choice.
type Harness struct {
	// NewStore returns a new, independent client of the store under test:
	// its own connections or pool, like a separate gateway pod, but always
	// reaching the same backend, so state written through one is seen by
	// all. The suite calls it several times per subtest and closes every
	// store it gets (a store must tolerate a second Close). NewStore reports
	// setup problems with t.Fatal.
	NewStore func(t *testing.T) ratelimit.Store

	// Clock, when non-nil, is the clock every store NewStore returns reads
	// its time from. The suite then moves time itself and compares whole
	// outcomes with the algorithm's result at fixed instants, and checks
	// TTLs exactly. Leave it nil for stores that use a server clock: the
	// suite then uses limits whose refill is negligible while it runs (one
	// unit per 1000 hours or a little more) and compares admission and
	// remaining counts.
	Clock *Clock

	// Stop and Start, when both are non-nil, take the backend down and
	// bring it back on the same address. They enable the store-down
	// checks: typed errors while down, no goroutine leak, and recovery of
	// an existing store once Start returns. Start must block until the
	// server accepts connections again.
	Stop, Start func(t *testing.T)

	// Algorithms are the algorithms every check runs with. Nil means the
	// default set: every algorithm of the sluice catalog (see
	// DefaultAlgorithms).
	Algorithms []ratelimit.Algorithm

	// Approximate, when non-nil, declares the store approximate and only
	// eventually consistent (such as a gossip cluster whose nodes decide
	// locally). It returns how far the number of units admitted under
	// limit, on a key no client has used before, may stray from the exact
	// count when the suite spreads concurrent calls over stores stores it
	// got from consecutive NewStore calls (so a harness that hands out
	// backends round-robin knows how many distinct ones that is). It is
	// called from the test goroutine of a check.
	//
	// The suite then checks an approximate store as follows. The checks
	// of every decision against the algorithm (Sequential) and of
	// linearizability are skipped, with a message saying why: an
	// eventually consistent store does neither by design. Concurrent
	// admission (Contention, racing composites) is checked against the
	// Bound, and afterwards every client must agree, within the settle
	// time, on what is left. The single-key checks (composites,
	// isolation, peek, reset, TTL, close, contexts, bad input, corrupt
	// state) still spread their calls over several clients but run one
	// step at a time on a quiet key: a write through one client must
	// become visible through the others within 5 seconds (the suite
	// polls), and a take the check expects to be admitted may be denied
	// for a while (a startup allowance on a key the client has just met)
	// and is tried again, since a denied take changes nothing. Everything
	// else is checked exactly as for an exact store. Exact stores leave
	// Approximate nil and get one try at every step.
	Approximate func(limit ratelimit.Limit, stores int) Bound

	// CallTimeout is the deadline of the context of each call the suite
	// makes to a store (zero means 30 seconds). A call that has not
	// returned half as long again after it, because the store ignores its
	// context or is stuck on a lock, fails its check as hung, as does a
	// panic inside the store; the other checks still run.
	CallTimeout time.Duration

	// Seed seeds the suite's random choices; 0 picks a random seed. The
	// seed is logged so that a failure can be replayed.
	Seed uint64
}

// Bound is how far an approximate store may stray from the exact number
// of admitted units: it may admit up to Under fewer and up to Over more.
// Both are non-negative; the zero Bound means exact.
type Bound struct {
	Under, Over int64
}

// DefaultAlgorithms returns the algorithms a Harness with nil Algorithms
// runs with.
func DefaultAlgorithms() []ratelimit.Algorithm { return defaultAlgorithms() }

// Clock is a manual clock for stores that accept an injected
// ratelimit.Clock. Its time only moves when the suite calls Set or
// Advance. It is safe for concurrent use; create it with NewClock.
type Clock struct {
	ns atomic.Int64
}

// NewClock returns a Clock reading start.
func NewClock(start time.Time) *Clock {
	c := &Clock{}
	c.ns.Store(start.UnixNano())
	return c
}

// Now returns the clock's time in Unix nanoseconds.
func (c *Clock) Now() int64 { return c.ns.Load() }

// Set moves the clock to ns Unix nanoseconds, forwards or backwards.
func (c *Clock) Set(ns int64) { c.ns.Store(ns) }

// Advance moves the clock forward by d (backward when d is negative).
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

var _ ratelimit.Clock = (*Clock)(nil)

// Run runs the conformance suite on the store h describes, reporting each
// misbehaviour as a failure of a named subtest of t. It fails at once when
// h has no NewStore or lists no algorithm.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.NewStore == nil {
		t.Fatal("storetest: Harness.NewStore is nil")
	}
	if h.Algorithms == nil {
		h.Algorithms = DefaultAlgorithms()
	}
	if len(h.Algorithms) == 0 {
		t.Fatal("storetest: no algorithm to test with")
	}
	if (h.Stop == nil) != (h.Start == nil) {
		t.Fatal("storetest: Harness.Stop and Harness.Start must be set together")
	}
	seed := h.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("storetest: seed %d (set Harness.Seed to replay), %d algorithms, clock injected: %t, approximate: %t",
		seed, len(h.Algorithms), h.Clock != nil, h.Approximate != nil)
	s := &suite{h: h, seed: seed}
	for _, tc := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"Sequential", s.testSequential},
		{"LimitChange", s.testLimitChange},
		{"Contention", s.testContention},
		{"Linearizable", s.testLinearizable},
		{"Composite", s.testComposite},
		{"Isolation", s.testIsolation},
		{"Peek", s.testPeek},
		{"Reset", s.testReset},
		{"TTL", s.testTTL},
		{"Close", s.testClose},
		{"Context", s.testContext},
		{"BadInput", s.testBadInput},
		{"CorruptState", s.testCorruptState},
		{"StoreDown", s.testStoreDown},
	} {
		t.Run(tc.name, tc.fn)
	}
}

// suite carries the harness and the per-run seed to every check.
type suite struct {
	h    Harness
	seed uint64
	n    atomic.Uint64 // distinguishes the random sources of subtests

	checks sync.Map // *testing.T → *checkState of the check's stores
}

// rng returns a random source derived from the run's seed; each call gives
// a different, reproducible stream.
func (s *suite) rng() *rand.Rand {
	return rand.New(rand.NewPCG(s.seed, s.n.Add(1)))
}

// stores returns n new stores, closed when t ends.
func (s *suite) stores(t *testing.T, n int) []ratelimit.Store {
	t.Helper()
	out := make([]ratelimit.Store, n)
	for i := range out {
		st := s.newStore(t)
		t.Cleanup(func() {
			if err := st.Close(); err != nil && !errors.Is(err, errStoreBroken) {
				t.Errorf("Close: %v", err)
			}
		})
		out[i] = st
	}
	return out
}

// base is the instant the suite sets an injected clock to at the start of
// a check: a round time far from the int64 limits.
var base = time.Date(2031, 3, 14, 15, 9, 26, 0, time.UTC).UnixNano()

// startClock resets the injected clock, if any, to base.
func (s *suite) startClock() {
	if s.h.Clock != nil {
		s.h.Clock.Set(base)
	}
}

// now returns the time the suite assumes the store sees: the injected
// clock, or the local wall clock.
func (s *suite) now() int64 {
	if s.h.Clock != nil {
		return s.h.Clock.Now()
	}
	return time.Now().UnixNano()
}

// frozen is a limit under which nothing refills while the suite runs:
// one unit per frozenPeriod (1000 hours or a little more), so admission
// and remaining counts do not depend on the store's clock.
func (s *suite) frozen(burst int64) ratelimit.Limit {
	p := 1000 * time.Hour
	if s.h.Clock == nil {
		p = frozenPeriod()
	}
	return ratelimit.Limit{Count: 1, Period: p, Burst: burst}
}

// frozenPeriod is the Period of frozen limits on a store with a server
// clock. Window algorithms start a window at every multiple of Period
// since the Unix epoch; a check whose calls straddled one would see a
// key's consumption vanish between the suite's reference instant and the
// store's own. A fixed 1000 hours puts such a boundary in the middle of a
// run once in 41 days, so the Period is chosen, once per test binary, as
// the first whole number of hours from 1000 on that keeps the wall clock
// at least frozenMargin from every multiple of it. (With an injected clock
// the suite and the store read the same instant, so 1000 hours is kept
// for reproducible outcomes.)
var frozenPeriod = sync.OnceValue(func() time.Duration {
	return periodAwayFrom(time.Now().UnixNano(), 1000*time.Hour, frozenMargin)
})

// frozenMargin is how far the wall clock stays from a window boundary of
// a frozen limit: far longer than any run of the suite.
const frozenMargin = 24 * time.Hour

// periodAwayFrom returns the first period of whole hours from start on
// whose multiples are all at least margin away from now.
func periodAwayFrom(now int64, start, margin time.Duration) time.Duration {
	for p := start; ; p += time.Hour {
		if off := now % int64(p); off >= int64(margin) && int64(p)-off >= int64(margin) {
			return p
		}
	}
}

// newKey returns a key unique to this run and check.
func newKey(t *testing.T, r *rand.Rand, name string) string {
	return fmt.Sprintf("storetest:%016x:%s", r.Uint64(), name)
}

// opContext is the context of one call of the suite: it carries the
// harness's call deadline (the watchdog of guard stops a store that ignores
// it).
func (s *suite) opContext(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), s.callTimeout())
}

// apply is Store.Apply with the suite's per-call deadline.
func (s *suite) apply(t *testing.T, st ratelimit.Store, c ratelimit.Check) (ratelimit.Outcome, error) {
	ctx, cancel := s.opContext(t)
	defer cancel()
	return st.Apply(ctx, c)
}

// mustApply is apply that fails the check on error.
func (s *suite) mustApply(t *testing.T, st ratelimit.Store, c ratelimit.Check) ratelimit.Outcome {
	t.Helper()
	o, err := s.apply(t, st, c)
	switch {
	case errors.Is(err, errStoreBroken):
		t.Fatal(err)
	case err != nil:
		t.Fatalf("Apply(%s): unexpected error: %v", describe(c), err)
	}
	return o
}

// remaining peeks at key and returns the units it could admit now.
func (s *suite) remaining(t *testing.T, st ratelimit.Store, c ratelimit.Check) int64 {
	t.Helper()
	c.Op, c.Cost, c.MaxWait = ratelimit.OpTake, 0, 0
	return s.mustApply(t, st, c).Remaining
}

// describe renders a check for failure messages.
func describe(c ratelimit.Check) string {
	alg := "<nil>"
	if c.Algorithm != nil {
		alg = c.Algorithm.Name()
	}
	s := fmt.Sprintf("%s ns=%s key=%s alg=%s limit=%s cost=%d", c.Op, keyfmt.Quote(c.Namespace), keyfmt.Quote(c.Key), alg, c.Limit, c.Cost)
	if c.Op == ratelimit.OpReserve {
		s += fmt.Sprintf(" maxWait=%s", c.MaxWait)
	}
	return s
}

// typedStoreErr reports whether err is one of the errors a store may
// return when its backend fails: certainly not applied, or maybe applied.
func typedStoreErr(err error) bool {
	return errors.Is(err, ratelimit.ErrUnavailable) || errors.Is(err, ratelimit.ErrUnknownOutcome)
}

// forEachAlg runs fn as a subtest per algorithm.
func (s *suite) forEachAlg(t *testing.T, fn func(t *testing.T, alg ratelimit.Algorithm)) {
	for _, alg := range s.h.Algorithms {
		t.Run(alg.Name(), func(t *testing.T) { fn(t, alg) })
	}
}
