package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// limitChange is one change of a key's limit: from, then to.
type limitChange struct {
	name     string
	from, to ratelimit.Limit
}

// limitChanges are the changes the LimitChange check makes: a larger and a
// smaller burst, a faster and a slower rate. Periods stay the same, since
// window algorithms align windows to the Period and a new Period rightly
// starts a new window. Without an injected clock the limits are frozen
// (their Count changes the rate while nothing refills during the run).
func (s *suite) limitChanges() []limitChange {
	if s.h.Clock == nil {
		f := func(count, burst int64) ratelimit.Limit {
			l := s.frozen(burst)
			l.Count = count
			return l
		}
		return []limitChange{
			{"burst=larger", f(1, 8), f(1, 20)},
			{"burst=smaller", f(1, 8), f(1, 3)},
			{"rate=faster", f(1, 8), f(4, 8)},
			{"rate=slower", f(4, 8), f(1, 8)},
		}
	}
	return []limitChange{
		{"burst=larger", ratelimit.Limit{Count: 10, Period: time.Second, Burst: 8}, ratelimit.Limit{Count: 10, Period: time.Second, Burst: 20}},
		{"burst=smaller", ratelimit.Limit{Count: 10, Period: time.Second, Burst: 8}, ratelimit.Limit{Count: 10, Period: time.Second, Burst: 3}},
		{"rate=faster", ratelimit.Limit{Count: 2, Period: time.Second, Burst: 8}, ratelimit.Limit{Count: 50, Period: time.Second, Burst: 8}},
		{"rate=slower", ratelimit.Limit{Count: 50, Period: time.Second, Burst: 8}, ratelimit.Limit{Count: 2, Period: time.Second, Burst: 8}},
	}
}

// testLimitChange checks that a store carries a key's state over a change
// of its limit (same namespace, key and algorithm): every outcome under
// the new limit equals the algorithm's own decision on the state the old
// limit left (whole outcomes with an injected clock; admission and
// remaining counts under frozen limits otherwise), and a key drained under
// the old limit is not refilled to a fresh burst by the change.
func (s *suite) testLimitChange(t *testing.T) {
	if s.h.Approximate != nil {
		t.Skip("storetest: approximate store: decisions are not compared one by one, so neither are those after a limit change (Contention checks the bound)")
	}
	s.forEachAlg(t, func(t *testing.T, alg ratelimit.Algorithm) {
		for _, lc := range s.limitChanges() {
			t.Run(lc.name, func(t *testing.T) { s.limitChange(t, alg, lc) })
		}
	})
}

// limitChange runs one change on two keys, alternating two clients: a key
// partly used under lc.from, then used at random under lc.to and again
// under lc.from; and a key drained under lc.from, then taken from one unit
// at a time under lc.to at the same instant.
func (s *suite) limitChange(t *testing.T, alg ratelimit.Algorithm, lc limitChange) {
	for _, l := range []ratelimit.Limit{lc.from, lc.to} {
		c := ratelimit.Check{Key: "k", Algorithm: alg, Limit: l}
		if err := c.Validate(); err != nil {
			t.Skipf("storetest: %s refuses the limit %s: %v", alg.Name(), l, err)
		}
	}
	r := s.rng()
	sts := s.stores(t, 2)
	s.startClock()
	ns := fmt.Sprintf("lc%x", r.Uint32())
	t.Run("Carried", func(t *testing.T) {
		c := ratelimit.Check{Namespace: ns, Key: newKey(t, r, "carried"), Algorithm: alg}
		states := []heldState{{}}
		var history []string
		step := 0
		for _, phase := range []struct {
			limit ratelimit.Limit
			steps int
		}{{lc.from, 4}, {lc.to, 30}, {lc.from, 10}} {
			c.Limit = phase.limit
			for range phase.steps {
				c.Cost = s.randomCost(r, c.Limit)
				s.advance(r, c.Limit)
				now := s.now()
				got, err := s.apply(t, sts[step%2], c)
				history = append(history, fmt.Sprintf("%s%s", describe(c), s.at(now)))
				if err != nil {
					t.Fatalf("step %d: %s: unexpected error: %v", step, describe(c), err)
				}
				next, want := s.carry(t, states, c, now, got)
				if next == nil {
					t.Fatalf("step %d%s: %s: %s: the store did not carry the key's state over the change from %s to %s as the algorithm does\nstore:     %+v\nalgorithm: %+v\nlast steps:\n%s",
						step, s.at(now), describe(c), s.compare(got, want), lc.from, lc.to, got, want, tail(history))
				}
				states = next
				step++
			}
		}
	})
	t.Run("Drained", func(t *testing.T) {
		// All at one instant: nothing refills and no state expires.
		var ref reference
		c := ratelimit.Check{Namespace: ns, Key: newKey(t, r, "drained"), Algorithm: alg, Limit: lc.from, Cost: 1}
		step, agreed := 0, true
		// decide takes through the next client and reports the first
		// outcome that differs from the algorithm's; after it the
		// reference says nothing more, but admissions are still counted.
		decide := func() (storeAllowed, algAllowed bool) {
			t.Helper()
			now := s.now()
			want, err := ref.apply(c, now)
			if err != nil {
				t.Fatalf("%s: the algorithm fails: %v", describe(c), err)
			}
			got := s.mustApply(t, sts[step%2], c)
			step++
			if d := s.compare(got, want); d != "" && agreed {
				agreed = false
				t.Errorf("step %d: %s: %s (on a key drained under %s)\nstore:     %+v\nalgorithm: %+v", step, describe(c), d, lc.from, got, want)
			}
			return got.Allowed, want.Allowed
		}
		for i := range lc.from.Burst + 1 {
			if allowed, _ := decide(); allowed != (i < lc.from.Burst) {
				t.Fatalf("take %d of 1 unit from a fresh key of burst %d: allowed=%t", i+1, lc.from.Burst, allowed)
			}
		}
		c.Limit = lc.to
		// A window algorithm whose window length changes with the limit
		// may start a new window by its own rules; only a fresh burst the
		// algorithm itself refuses is the store's doing.
		admitted, algAdmitted := int64(0), int64(0)
		for range lc.to.Burst + 1 {
			storeAllowed, algAllowed := decide()
			if storeAllowed {
				admitted++
			}
			if algAllowed {
				algAdmitted++
			}
		}
		if admitted >= lc.to.Burst && algAdmitted < lc.to.Burst {
			t.Errorf("a key drained under %s then admitted %d units under %s at the same instant: the change gave a fresh burst (state reset)", lc.from, admitted, lc.to)
		}
	})
}

// heldState is a state a store may hold for a key: the algorithm's
// encoded state (nil for none) and the instant from which the store may
// drop it (its last write's now plus TTL).
type heldState struct {
	state  []byte
	expiry int64
}

// carry returns the states the store may hold after it answered got to c
// at now, given it held one of states before, and the algorithm's outcome
// on the first of them (for messages); no state when got matches none.
//
// A store may drop a state once its TTL has passed. Under the limit that
// wrote it, that changes nothing (the state then equals the initial one);
// under another limit it may: a state that a fast rate has long refilled
// can still count against a slower one. Both are correct, so a state past
// its expiry is followed both as kept and as dropped, and the store's
// outcomes choose. A state the store answered as dropped without writing
// is still followed as held: a lazily expiring store shows it again when
// the clock goes back before its expiry.
func (s *suite) carry(t *testing.T, states []heldState, c ratelimit.Check, now int64, got ratelimit.Outcome) ([]heldState, ratelimit.Outcome) {
	t.Helper()
	var next []heldState
	var first ratelimit.Outcome
	seen := map[string]bool{}
	tried := 0
	for _, held := range states {
		options := [][]byte{held.state}
		if len(held.state) > 0 && now >= held.expiry {
			options = append(options, nil)
		}
		for _, prior := range options {
			want, after, err := ratelimit.Evaluate(c.Algorithm, c.Op, prior, now, c.Limit, c.Cost, c.MaxWait, nil)
			if err != nil {
				t.Fatalf("%s: the algorithm fails: %v", describe(c), err)
			}
			if tried++; tried == 1 {
				first = want
			}
			if s.compare(got, want) != "" {
				continue
			}
			h := heldState{state: prior, expiry: held.expiry}
			if want.Changed {
				h = heldState{state: after, expiry: now + int64(want.TTL)}
			} else if prior == nil {
				// A store that expires lazily only hid the state: it is
				// still there, and visible again if the clock goes back
				// before its expiry (which never mints capacity).
				h = held
			}
			if id := fmt.Sprintf("%x@%d", h.state, h.expiry); !seen[id] {
				seen[id] = true
				next = append(next, h)
			}
		}
	}
	return next, first
}

// at renders now for messages as the time since the injected clock's
// start; with a server clock the suite's instant says nothing, so it is
// left out.
func (s *suite) at(now int64) string {
	if s.h.Clock == nil {
		return ""
	}
	return fmt.Sprintf(" at +%s", time.Duration(now-base))
}
