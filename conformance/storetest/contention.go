package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// Contention parameters: callers goroutines spread over clients stores take
// one unit each, calls times, from one key of burst units that never
// refills; exactly burst calls must be allowed, in each of rounds rounds.
const (
	contentionCallers = 64
	contentionStores  = 4
	contentionCalls   = 4
	contentionBurst   = 100
	contentionRounds  = 3
)

// bound returns the admitted-count window [lo, hi] for want units taken
// under l from n clients: exact unless the harness declares an
// approximation.
func (s *suite) bound(l ratelimit.Limit, n int, want int64) (lo, hi int64) {
	if s.h.Approximate == nil {
		return want, want
	}
	b := s.h.Approximate(l, n)
	return want - b.Under, want + b.Over
}

// testContention checks exact admission when many goroutines on several
// clients race for one key.
func (s *suite) testContention(t *testing.T) {
	s.forEachAlg(t, func(t *testing.T, alg ratelimit.Algorithm) {
		r := s.rng()
		s.startClock()
		sts := s.stores(t, contentionStores)
		l := s.frozen(contentionBurst)
		lo, hi := s.bound(l, contentionStores, contentionBurst)
		for round := range contentionRounds {
			c := ratelimit.Check{Key: newKey(t, r, fmt.Sprintf("hot%d", round)), Algorithm: alg, Limit: l, Cost: 1}
			allowed, errs := race(t, sts, contentionCallers, contentionCalls, func(_ int, st ratelimit.Store) (bool, error) {
				o, err := s.apply(t, st, c)
				return o.Allowed, err
			})
			if errs > 0 {
				t.Errorf("round %d: %d of %d calls failed (first error logged above); a conforming store has no errors under contention", round, errs, contentionCallers*contentionCalls)
			}
			if allowed < lo || allowed > hi {
				t.Errorf("round %d: %d of %d calls allowed on one key of burst %d from %d clients, want %s",
					round, allowed, contentionCallers*contentionCalls, contentionBurst, contentionStores, window(lo, hi))
			}
			// Once the calls stop, every client must agree on what is
			// left: nothing for an exact store; for an approximate one,
			// whatever it admitted short of the burst (an excess is held
			// as debt, which reads as 0).
			targets, want := sts[:1], int64(0)
			if s.h.Approximate != nil {
				targets, want = sts, max(contentionBurst-allowed, 0)
			}
			for i, st := range targets {
				s.expectSettle(t, func() string {
					if got := s.remaining(t, st, c); got != want {
						return fmt.Sprintf("round %d: client %d: Remaining = %d after %d of the burst of %d were admitted, want %d", round, i, got, allowed, contentionBurst, want)
					}
					return ""
				})
			}
		}
	})
}

// window renders an admitted-count window for messages.
func window(lo, hi int64) string {
	if lo == hi {
		return fmt.Sprintf("exactly %d", lo)
	}
	return fmt.Sprintf("between %d and %d", lo, hi)
}

// race runs callers goroutines, each making calls calls of fn with its
// index g on the store chosen round-robin (sts[g%len(sts)]), all released
// at once. It returns how many calls were
// allowed and how many failed, logging the first failure.
func race(t *testing.T, sts []ratelimit.Store, callers, calls int, fn func(g int, st ratelimit.Store) (bool, error)) (allowed int64, errs int64) {
	t.Helper()
	var (
		wg       sync.WaitGroup
		start    = make(chan struct{})
		nAllowed atomic.Int64
		nErrs    atomic.Int64
		first    sync.Once
	)
	for g := range callers {
		st := sts[g%len(sts)]
		wg.Go(func() {
			<-start
			for range calls {
				ok, err := fn(g, st)
				if err != nil {
					nErrs.Add(1)
					first.Do(func() { t.Logf("first error under contention: %v", err) })
					continue
				}
				if ok {
					nAllowed.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	return nAllowed.Load(), nErrs.Load()
}
