package tier

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/algorithms/slidinglog"
	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// noRefill is a limit whose refill is negligible while a test runs.
var noRefill = ratelimit.Limit{Count: 1, Period: 1000 * time.Hour, Burst: 100}

func check(key string, l ratelimit.Limit) ratelimit.Check {
	return ratelimit.Check{Namespace: "r", Key: key, Algorithm: gcra.New(), Limit: l, Cost: 1}
}

// admitUnderContention makes stores Stores with newStore, each called by
// callers goroutines applying c calls times, and returns how many calls
// were admitted. A call's error fails t and ends its goroutine.
func admitUnderContention(t *testing.T, stores int, newStore func() *Store, callers, calls int, c ratelimit.Check) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range stores {
		s := newStore()
		for range callers {
			wg.Go(func() {
				for range calls {
					o, err := s.Apply(t.Context(), c)
					if err != nil {
						t.Error(err)
						return
					}
					if o.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	return admitted.Load()
}

// TestLeaseExactUnderContentionConcurrentSafe: four Stores, 16 callers
// each, one key of burst 100 without refill: every unit is admitted once,
// never more, and no lease strands units while every node has demand.
func TestLeaseExactUnderContentionConcurrentSafe(t *testing.T) {
	b := newBacking(t, nil)
	newStore := func() *Store { return newTier(t, b, WithRule("r", Rule{Mode: Lease})) }
	if got := admitUnderContention(t, 4, newStore, 16, 20, check("k", noRefill)); got != noRefill.Burst {
		t.Fatalf("admitted %d, want exactly %d", got, noRefill.Burst)
	}
}

// TestLeaseGrowsAndRefundsOnClose: a lone caller's leases grow, so most
// decisions are local, and Close gives back what the lease still holds.
func TestLeaseGrowsAndRefundsOnClose(t *testing.T) {
	b := newBacking(t, nil)
	l := ratelimit.Limit{Count: 10, Period: 1000 * time.Hour, Burst: 1000}
	s, err := New(b, WithRule("r", Rule{Mode: Lease, Nodes: 2, LeaseTTL: time.Hour}))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		o, err := s.Apply(t.Context(), check("k", l))
		if err != nil || !o.Allowed {
			t.Fatalf("take %d: %+v %v", i, o, err)
		}
	}
	st := s.Stats()
	if st.LocalDecisions < 80 || st.StoreDecisions+st.LocalDecisions != 100 {
		t.Errorf("stats %+v: want at least 80 of 100 decisions local", st)
	}
	if held := b.level(t, check("k", l)); held >= 900 {
		t.Fatalf("backing level %d: the leases took nothing ahead", held)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := b.level(t, check("k", l)); got != 900 {
		t.Fatalf("after Close the backing level is %d, want 900 (100 spent, the rest refunded)", got)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Apply(t.Context(), check("k", l)); !errors.Is(err, ratelimit.ErrClosed) {
		t.Fatalf("Apply after Close: %v, want ErrClosed", err)
	}
}

// TestLeaseExpiryRefunds: an expired lease's units go back to the backing
// store, and the state of an idle key is dropped.
func TestLeaseExpiryRefunds(t *testing.T) {
	b := newBacking(t, nil)
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := ratelimit.ClockFunc(now.Load)
	l := ratelimit.Limit{Count: 10, Period: 1000 * time.Hour, Burst: 1000}
	s := newTier(t, b, WithClock(clock), WithRule("r", Rule{Mode: Lease, Nodes: 1, LeaseTTL: time.Hour}))
	for range 10 {
		if o, err := s.Apply(t.Context(), check("k", l)); err != nil || !o.Allowed {
			t.Fatal(o, err)
		}
	}
	if got := b.level(t, check("k", l)); got == 990 {
		t.Fatal("no lease was taken ahead")
	}
	now.Add(int64(time.Hour))
	s.sweepLeases()
	if got := b.level(t, check("k", l)); got != 990 {
		t.Fatalf("after expiry the backing level is %d, want 990", got)
	}
	now.Add(int64(3 * time.Hour))
	s.sweepLeases()
	n := 0
	s.leases.each(func(stateKey, *leaseState) bool { n++; return true })
	if n != 0 {
		t.Fatalf("%d idle lease states kept", n)
	}
}

// TestLeaseDeniedCached: near exhaustion a lease is the cost itself, and
// a denial of the backing store is answered locally until its RetryAfter.
func TestLeaseDeniedCached(t *testing.T) {
	b := newBacking(t, nil)
	s := newTier(t, b, WithRule("r", Rule{Mode: Lease}))
	l := ratelimit.Limit{Count: 1, Period: time.Hour, Burst: 3}
	admitted := 0
	for range 10 {
		o, err := s.Apply(t.Context(), check("k", l))
		if err != nil {
			t.Fatal(err)
		}
		if o.Allowed {
			admitted++
		} else if o.RetryAfter <= 0 {
			t.Fatalf("denied with RetryAfter %s", o.RetryAfter)
		}
	}
	if admitted != 3 {
		t.Fatalf("admitted %d of burst 3", admitted)
	}
	calls := b.calls.Load()
	if calls > 4 {
		t.Fatalf("%d backing calls for 3 admissions and cached denials", calls)
	}
}

// TestPassThrough: Exact rules, peeks, other ops and algorithms that
// cannot refund go to the backing store as they are.
func TestPassThrough(t *testing.T) {
	b := newBacking(t, nil)
	s := newTier(t, b, WithRule("r", Rule{Mode: Lease}))
	c := check("k", noRefill)
	c.Algorithm = slidinglog.New()
	for range 5 {
		if _, err := s.Apply(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.calls.Load(); got != 5 {
		t.Fatalf("sliding log: %d backing calls for 5 takes, want 5", got)
	}
	c = check("k2", noRefill)
	c.Namespace = "other"
	c.Algorithm = tokenbucket.New()
	for range 5 {
		if _, err := s.Apply(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.calls.Load(); got != 10 {
		t.Fatalf("exact rule: %d backing calls for 10 takes, want 10", got)
	}
	// A composite is the backing store's, all or nothing.
	checks := []ratelimit.Check{check("a", noRefill), check("b", ratelimit.Limit{Count: 1, Period: time.Hour, Burst: 1})}
	checks[1].Cost = 2
	out := make([]ratelimit.Outcome, 2)
	ok, err := s.ApplyAll(t.Context(), checks, out)
	if err != nil || ok {
		t.Fatalf("ApplyAll = %v, %v; want denied", ok, err)
	}
	if got := b.level(t, check("a", noRefill)); got != noRefill.Burst {
		t.Fatalf("denied composite consumed: level %d", got)
	}
}

// TestDegradedLease: when the backing store fails, the lease's units are
// still spent, then checks fail fast with ErrUnavailable without waiting
// on the store, at most one probe per interval reaches it, and the Store
// recovers when it answers again.
func TestDegradedLease(t *testing.T) {
	b := newBacking(t, nil)
	ev := &events{}
	s := newTier(t, b, WithObserver(ev.observe), WithProbeInterval(time.Hour),
		WithRule("r", Rule{Mode: Lease, Nodes: 1, LeaseTTL: time.Hour}))
	l := ratelimit.Limit{Count: 10, Period: 1000 * time.Hour, Burst: 1000}
	for range 8 { // leases of 1, 2, 4: 7 units, then one of 8
		if _, err := s.Apply(t.Context(), check("k", l)); err != nil {
			t.Fatal(err)
		}
	}
	b.down.Store(true)
	admitted, failed := 0, 0
	for range 40 {
		o, err := s.Apply(t.Context(), check("k", l))
		switch {
		case err == nil && o.Allowed:
			admitted++
		case isUnavailable(err):
			failed++
		default:
			t.Fatalf("degraded take: %+v %v", o, err)
		}
	}
	if admitted != 7 || failed != 33 {
		t.Fatalf("degraded: %d admitted from the lease, %d failed; want 7 and 33", admitted, failed)
	}
	// The lease's 7 units are spent as usual, the next take finds the
	// store down, and the 32 after it are degraded decisions.
	if ev.count(DegradedDecision) != 32 || ev.count(StoreError) != 1 {
		t.Errorf("%d degraded decisions and %d store errors observed, want 32 and 1", ev.count(DegradedDecision), ev.count(StoreError))
	}
	callsDown := b.calls.Load()
	// The probe interval is an hour: one failed call at most would have
	// been a probe; the lease ran out locally.
	if callsDown > 5 {
		t.Errorf("%d backing calls, want the failed ones bounded", callsDown)
	}
	b.down.Store(false)
	s.health.nextProbe.Store(0) // the probe interval has passed
	o, err := s.Apply(t.Context(), check("k", l))
	if err != nil || !o.Allowed {
		t.Fatalf("after recovery: %+v %v", o, err)
	}
	if ev.count(StoreRecovered) != 1 || s.health.degraded() {
		t.Fatalf("recovered events %d, degraded %t", ev.count(StoreRecovered), s.health.degraded())
	}
}

// TestBudgetDegrades: a backing store slower than the caller's deadline
// degrades the Store like a failure; later calls do not wait.
func TestBudgetDegrades(t *testing.T) {
	b := newBacking(t, nil)
	s := newTier(t, b, WithProbeInterval(time.Hour), WithRule("r", Rule{Mode: Lease}))
	b.delay.Store(int64(time.Hour))
	ctx, cancel := contextWithTimeout(t, 100*time.Millisecond) // long enough for the call to begin
	defer cancel()
	if _, err := s.Apply(ctx, check("k", noRefill)); err == nil {
		t.Fatal("no error from a store slower than the deadline")
	}
	if !s.health.degraded() {
		t.Fatal("not degraded after the budget ran out")
	}
	// No deadline at all now: a call must still not wait on the store.
	if _, err := s.Apply(t.Context(), check("k", noRefill)); !isUnavailable(err) {
		t.Fatalf("degraded call: %v, want ErrUnavailable at once", err)
	}
}
