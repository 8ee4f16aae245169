package redisstore_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/backends/redisstore"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// manualClock is an injected clock for WithTestClock.
type manualClock struct{ ns int64 }

func (c *manualClock) Now() int64 { return c.ns }

// randomLimit returns a valid limit whose Burst·Period is below 2^50 (the
// native path's bound), often near an edge.
func randomLimit(r *rand.Rand) ratelimit.Limit {
	for {
		var l ratelimit.Limit
		switch r.IntN(4) {
		case 0: // everyday limits
			l = ratelimit.Limit{Count: 1 + r.Int64N(1000), Period: time.Duration(1+r.Int64N(3600)) * time.Second, Burst: 1 + r.Int64N(1000)}
		case 1: // odd periods, counts that do not divide them
			l = ratelimit.Limit{Count: 1 + r.Int64N(1<<20), Period: time.Duration(1 + r.Int64N(1<<30)), Burst: 1 + r.Int64N(1<<16)}
		case 2: // Burst·Period just below 2^50
			p := int64(1) << (10 + r.IntN(30))
			b := (int64(1)<<50 - 1) / p
			l = ratelimit.Limit{Count: 1 + r.Int64N(ratelimit.MaxCount), Period: time.Duration(p), Burst: max(1, b-r.Int64N(3))}
		default: // tiny
			l = ratelimit.Limit{Count: 1 + r.Int64N(5), Period: time.Duration(1 + r.Int64N(10)), Burst: 1 + r.Int64N(5)}
		}
		if l.Validate() == nil && l.Burst*int64(l.Period) < 1<<50 {
			return l
		}
	}
}

// step returns the next instant: mostly small advances, sometimes a jump
// backwards (a clock that went back) or years forwards.
func step(r *rand.Rand, now int64, l ratelimit.Limit) int64 {
	switch r.IntN(10) {
	case 0:
		return now - r.Int64N(int64(l.Period)+1)
	case 1:
		return now + r.Int64N(10*365*24*int64(time.Hour))
	case 2:
		return now
	default:
		return now + r.Int64N(max(1, l.FillTime().Nanoseconds()/int64(l.Burst))*3+1)
	}
}

// TestNativeMatchesGo is the differential test of native.lua: random
// sequences of takes at injected instants (WithTestClock passes "now" to
// the script, a test-only hook) against the Go algorithm, comparing every
// outcome field and the stored state byte for byte, and checking that the
// script, not the generic fallback, decided.
func TestNativeMatchesGo(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv.addr())
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	for _, alg := range []ratelimit.Algorithm{gcra.New(), tokenbucket.New()} {
		t.Run("algo="+alg.Name(), func(t *testing.T) {
			clock := &manualClock{}
			prefix := randomPrefix(t)
			st, err := redisstore.New(c, redisstore.WithPrefix(prefix), redisstore.WithTestClock(clock), redisstore.WithTTLMargin(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			steps := 0
			for seq := range 60 {
				l := randomLimit(r)
				key := fmt.Sprintf("k%d", seq)
				clock.ns = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano() + r.Int64N(int64(365*24*time.Hour))
				var state []byte
				var history []string
				for range 40 {
					clock.ns = step(r, clock.ns, l)
					cost := r.Int64N(l.Burst + 1)
					switch r.IntN(8) {
					case 0:
						cost = 0
					case 1:
						cost = min(l.Burst+1+r.Int64N(3), ratelimit.MaxCost)
					case 2:
						cost = 1
					}
					want, next, err := alg.Decide(state, clock.ns, l, cost, nil)
					if err != nil {
						t.Fatal(err)
					}
					history = append(history, fmt.Sprintf("now=%d cost=%d -> %+v", clock.ns, cost, want))
					got, err := st.Apply(t.Context(), ratelimit.Check{Namespace: "d", Key: key, Algorithm: alg, Limit: l, Cost: cost})
					if err != nil {
						t.Fatalf("limit %+v: %v", l, err)
					}
					if got != want {
						t.Fatalf("limit %+v, history:\n%s\ngot  %+v\nwant %+v", l, joinLines(history), got, want)
					}
					if want.Changed {
						state = next
					}
					stored := storedState(t, c, prefix)
					if want.Allowed && want.Changed && string(stored) != string(state) {
						t.Fatalf("limit %+v, history:\n%s\nstored state %x, Go state %x", l, joinLines(history), stored, state)
					}
					steps++
				}
				if err := st.Reset(t.Context(), "d", key); err != nil {
					t.Fatal(err)
				}
			}
			calls, fallbacks := st.NativeCounts()
			if calls != int64(steps) {
				t.Fatalf("%d native calls for %d steps", calls, steps)
			}
			// States more than 2^50 ns ahead (a clock far behind) fall back;
			// they are rare here. Everything else must be decided by Lua.
			if fallbacks*20 > calls {
				t.Fatalf("%d of %d calls fell back to the generic path", fallbacks, calls)
			}
			t.Logf("%d steps, %d generic fallbacks", steps, fallbacks)
		})
	}
}

// TestNativeCompositeMatchesMemory compares random composites (several
// algorithms, repeated keys) on the native path with the embedded memory
// store at the same injected instants.
func TestNativeCompositeMatchesMemory(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv.addr())
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 2))
	clock := &manualClock{ns: time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC).UnixNano()}
	st, err := redisstore.New(c, redisstore.WithPrefix(randomPrefix(t)), redisstore.WithTestClock(clock), redisstore.WithTTLMargin(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	mem, err := ratelimit.NewMemoryStore(ratelimit.WithMemoryClock(ratelimit.ClockFunc(clock.Now)))
	if err != nil {
		t.Fatal(err)
	}
	algs := []ratelimit.Algorithm{gcra.New(), tokenbucket.New()}
	limits := []ratelimit.Limit{randomLimit(r), randomLimit(r), ratelimit.PerSecond(5), ratelimit.Every(time.Minute, 3).WithBurst(4)}
	for i := range 300 {
		clock.ns += r.Int64N(int64(200 * time.Millisecond))
		n := 1 + r.IntN(4)
		checks := make([]ratelimit.Check, n)
		for j := range checks {
			k := r.IntN(3)
			checks[j] = ratelimit.Check{Namespace: "c", Key: fmt.Sprintf("{x}%d", k), Algorithm: algs[k%2], Limit: limits[k], Cost: r.Int64N(3)}
		}
		got := make([]ratelimit.Outcome, n)
		want := make([]ratelimit.Outcome, n)
		gotOK, err := st.ApplyAll(t.Context(), checks, got)
		if err != nil {
			t.Fatal(err)
		}
		wantOK, err := mem.ApplyAll(t.Context(), checks, want)
		if err != nil {
			t.Fatal(err)
		}
		if gotOK != wantOK {
			t.Fatalf("step %d: allowed %v, memory store %v", i, gotOK, wantOK)
		}
		for j := range got {
			if got[j] != want[j] {
				t.Fatalf("step %d check %d (%s %+v cost %d): got %+v, memory store %+v", i, j, checks[j].Algorithm.Name(), checks[j].Limit, checks[j].Cost, got[j], want[j])
			}
		}
	}
	if calls, fallbacks := st.NativeCounts(); calls != 300 || fallbacks != 0 {
		t.Fatalf("native calls %d, fallbacks %d; want 300 and 0", calls, fallbacks)
	}
}

// storedState returns the value of the only key under prefix, or nil.
func storedState(t *testing.T, c *redis.Client, prefix string) []byte {
	t.Helper()
	keys, err := c.Keys(t.Context(), prefix+"*").Result()
	if err != nil || len(keys) > 1 {
		t.Fatalf("keys %q: %v", keys, err)
	}
	if len(keys) == 0 {
		return nil
	}
	v, err := c.Get(t.Context(), keys[0]).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func joinLines(lines []string) string {
	if len(lines) > 12 {
		lines = lines[len(lines)-12:]
	}
	s := ""
	for _, l := range lines {
		s += "  " + l + "\n"
	}
	return s
}
