package storetest

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// applyAll is Store.ApplyAll with the suite's per-call timeout and a
// fresh outcome slice.
func (s *suite) applyAll(t *testing.T, st ratelimit.Store, checks []ratelimit.Check) (bool, []ratelimit.Outcome, error) {
	ctx, cancel := s.opContext(t)
	defer cancel()
	out := make([]ratelimit.Outcome, len(checks))
	ok, err := st.ApplyAll(ctx, checks, out)
	return ok, out, err
}

// testComposite checks ApplyAll: all or nothing across keys, the same key
// twice applied in order, no deadlock with opposite key orders, and exact
// admission when composites race.
func (s *suite) testComposite(t *testing.T) {
	t.Run("AllOrNothing", func(t *testing.T) {
		s.forEachAlg(t, s.compositeAllOrNothing)
	})
	t.Run("SameKeyTwice", func(t *testing.T) {
		s.forEachAlg(t, s.compositeSameKey)
	})
	t.Run("OppositeOrders", func(t *testing.T) {
		s.forEachAlg(t, s.compositeOpposite)
	})
}

// compositeAllOrNothing takes from a roomy key and a tight key together
// until the tight one denies; from then on nothing may be taken from
// either, and each check reports its own verdict.
func (s *suite) compositeAllOrNothing(t *testing.T, alg ratelimit.Algorithm) {
	r := s.rng()
	s.startClock()
	sts := s.stores(t, 2)
	wide := ratelimit.Check{Namespace: "wide", Key: newKey(t, r, "a"), Algorithm: alg, Limit: s.frozen(10), Cost: 1}
	tight := ratelimit.Check{Namespace: "tight", Key: newKey(t, r, "b"), Algorithm: alg, Limit: s.frozen(3), Cost: 1}
	checks := []ratelimit.Check{wide, tight}
	for i := range 3 {
		s.visible(t, sts[i%2], wide, 10-int64(i))
		s.visible(t, sts[i%2], tight, 3-int64(i))
		if ok, out := s.takeAll(t, sts[i%2], checks); !ok || !out[0].Allowed || !out[1].Allowed {
			t.Fatalf("composite %d of 3 within both limits: allowed=%t outcomes %+v, want all allowed", i, ok, out)
		}
	}
	for i := range 3 {
		s.visible(t, sts[i%2], wide, 7)
		s.visible(t, sts[i%2], tight, 0)
		ok, out, err := s.applyAll(t, sts[i%2], checks)
		if err != nil {
			t.Fatalf("denied composite %d: %v", i, err)
		}
		if ok {
			t.Fatalf("composite over the tight limit was allowed: %+v", out)
		}
		if !out[0].Allowed || out[1].Allowed {
			t.Errorf("denied composite outcomes: wide allowed=%t tight allowed=%t, want true and false (each check reports its own verdict)", out[0].Allowed, out[1].Allowed)
		}
		if out[1].RetryAfter <= 0 {
			t.Errorf("denying check reports RetryAfter %s, want > 0", out[1].RetryAfter)
		}
	}
	s.expectSettle(t, func() string {
		if got := s.remaining(t, sts[0], wide); got != 7 {
			return fmt.Sprintf("wide key Remaining = %d after 3 allowed and 3 denied composites, want 7: a denied composite consumed", got)
		}
		return ""
	})
	// Order must not matter: the denying check first.
	ok, _, err := s.applyAll(t, sts[1], []ratelimit.Check{tight, wide})
	if err != nil || ok {
		t.Fatalf("composite with the exhausted key first: allowed=%t err=%v, want denied without error", ok, err)
	}
	s.expectSettle(t, func() string {
		if got := s.remaining(t, sts[1], wide); got != 7 {
			return fmt.Sprintf("wide key Remaining = %d after a denied composite listing it second, want 7", got)
		}
		return ""
	})
	// Racing composites: exactly as many as the tight key admits, and
	// the wide key pays for those only.
	wide.Key, tight.Key = newKey(t, r, "race-a"), newKey(t, r, "race-b")
	wide.Limit, tight.Limit = s.frozen(100), s.frozen(30)
	raceStores := s.stores(t, contentionStores)
	lo, hi := s.bound(tight.Limit, contentionStores, 30)
	allowed, errs := race(t, raceStores, 32, 4, func(_ int, st ratelimit.Store) (bool, error) {
		ok, _, err := s.applyAll(t, st, []ratelimit.Check{wide, tight})
		return ok, err
	})
	if errs > 0 {
		t.Errorf("%d racing composites failed", errs)
	}
	if allowed < lo || allowed > hi {
		t.Errorf("%d of 128 racing composites allowed, want %s (the tight key's burst)", allowed, window(lo, hi))
	}
	s.expectSettle(t, func() string {
		if got := s.remaining(t, raceStores[0], wide); got != 100-allowed {
			return fmt.Sprintf("wide key Remaining = %d after %d allowed composites, want %d: denied composites consumed", got, allowed, 100-allowed)
		}
		return ""
	})
}

// compositeSameKey names one key twice: the second check sees the first
// one's effect, and a denial of either leaves the key untouched.
func (s *suite) compositeSameKey(t *testing.T, alg ratelimit.Algorithm) {
	r := s.rng()
	s.startClock()
	st := s.stores(t, 1)[0]
	c := ratelimit.Check{Key: newKey(t, r, "twice"), Algorithm: alg, Limit: s.frozen(3), Cost: 1}
	ok, out := s.takeAll(t, st, []ratelimit.Check{c, c})
	if !ok || out[0].Remaining != 2 || out[1].Remaining != 1 {
		t.Fatalf("two takes of 1 from a fresh key of burst 3: allowed=%t remaining %d then %d, want allowed, 2 then 1", ok, out[0].Remaining, out[1].Remaining)
	}
	ok, out, err := s.applyAll(t, st, []ratelimit.Check{c, c, c})
	if err != nil {
		t.Fatal(err)
	}
	if ok || !out[0].Allowed || out[1].Allowed {
		t.Fatalf("three takes of 1 with 1 unit left: allowed=%t outcomes %+v, want the second check denied", ok, out)
	}
	if got := s.remaining(t, st, c); got != 1 {
		t.Errorf("Remaining = %d after a denied composite naming the key three times, want 1 (nothing taken)", got)
	}
}

// compositeOpposite races composites naming the same two keys in opposite
// orders from several clients; every call must finish (no deadlock) and
// exactly the burst be admitted.
func (s *suite) compositeOpposite(t *testing.T, alg ratelimit.Algorithm) {
	r := s.rng()
	s.startClock()
	sts := s.stores(t, contentionStores)
	a := ratelimit.Check{Key: newKey(t, r, "a"), Algorithm: alg, Limit: s.frozen(40), Cost: 1}
	b := ratelimit.Check{Key: newKey(t, r, "b"), Algorithm: alg, Limit: s.frozen(40), Cost: 1}
	// Even goroutines name b first, odd ones a first. Each call is
	// bounded by the suite's per-call timeout, so a deadlock shows up as
	// failed calls rather than a hung test.
	allowed, errs := race(t, sts, 16, 8, func(g int, st ratelimit.Store) (bool, error) {
		order := []ratelimit.Check{a, b}
		if g%2 == 0 {
			order = []ratelimit.Check{b, a}
		}
		ok, _, err := s.applyAll(t, st, order)
		return ok, err
	})
	if errs > 0 {
		t.Errorf("%d of 128 composites naming two keys in opposite orders failed (a deadlock shows as timeouts)", errs)
	}
	lo, hi := s.bound(a.Limit, len(sts), 40)
	if allowed < lo || allowed > hi {
		t.Errorf("%d of 128 composites allowed on two keys of burst 40, want %s", allowed, window(lo, hi))
	}
	// An approximate store that admitted more than the burst holds the
	// keys at 0 (or in debt, which reads as 0); an exact one admitted
	// exactly the burst.
	want := 40 - allowed
	if s.h.Approximate != nil {
		want = max(want, 0)
	}
	s.expectSettle(t, func() string {
		if ra, rb := s.remaining(t, sts[1], a), s.remaining(t, sts[3], b); ra != want || rb != want {
			return fmt.Sprintf("Remaining a=%d b=%d after %d allowed composites, want both %d", ra, rb, allowed, want)
		}
		return ""
	})
}
