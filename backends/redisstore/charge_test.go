package redisstore_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/algorithms/catalog"
	"github.com/sluicehq/sluice/algorithms/fixedwindow"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/algorithms/leakybucket"
	"github.com/sluicehq/sluice/algorithms/slidinglog"
	"github.com/sluicehq/sluice/algorithms/slidingwindow"
	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/backends/redisstore"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/arith"
	"github.com/sluicehq/sluice/internal/muldiv"
)

// chargers are the in-repo algorithms with a Charge (all native).
func chargers() []ratelimit.Algorithm {
	var out []ratelimit.Algorithm
	for _, alg := range catalog.All() {
		if _, ok := alg.(ratelimit.Charger); ok {
			out = append(out, alg)
		}
	}
	return out
}

// moderateLimit returns a random limit alg accepts whose Period and FillTime are at
// most 2^43 ns (about 2.4 hours): a debt or a carried count of up to 128
// Bursts (40 charges of at most 3 Bursts) is then repaid within 2^50 ns,
// and the clock steps back by at most 2^48 ns, so native.lua decides
// every call.
func moderateLimit(r *rand.Rand, alg ratelimit.Algorithm) ratelimit.Limit {
	const span = 1 << 43
	for {
		l := randomLimit(r, alg)
		if l.Period <= span && l.FillTime() <= span {
			return l
		}
	}
}

// chargeAmount returns a random charge: 0 (a peek), 1, up to Burst, a few
// Bursts (debt), or, when wild, up to MaxCost (debts too deep for the
// script).
func chargeAmount(r *rand.Rand, l ratelimit.Limit, wild bool) int64 {
	n := 6
	if wild {
		n = 8
	}
	switch r.IntN(n) {
	case 0:
		return 0
	case 1:
		return 1
	case 2, 3:
		return 1 + r.Int64N(l.Burst)
	case 4, 5:
		return min(l.Burst*(2+r.Int64N(2)), ratelimit.MaxCost)
	case 6:
		return ratelimit.MaxCost - r.Int64N(2)
	default:
		return 1 + r.Int64N(ratelimit.MaxCost)
	}
}

// TestNativeChargeMatchesGo is the differential test of native.lua's
// charges: random sequences of charges and takes on every algorithm with
// a Charge, at injected instants (steps forward, back and years ahead),
// against ratelimit.Evaluate on the Go algorithm, comparing every outcome
// field and the stored state byte for byte.
//
// In the moderate regime (limits refilled within 2^43 ns, charges of at
// most 3 Bursts, 40 steps a key) every debt is repaid within 2^51 ns and
// no call may fall back. In the wild regime (any limit in the
// native bounds, charges up to MaxCost) the script falls back, before
// writing, when the state it reads or the one it would write is not back
// to full within 2^51 ns (a debt or a carried count of up to
// MaxWindowSpan, about 2^61.5 ns; a gcra charge of 2^52 ns or more): the
// outcomes must still match, and every fallback must be such a call: one
// whose outcome, or the one that wrote the state it reads, has a
// ResetAfter of at least 2^51 ns. Sequences with a charge near MaxCost stay that deep
// until their end, so the wild share of fallbacks is high (50-75%).
func TestNativeChargeMatchesGo(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv.addr())
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 4))
	for _, regime := range []struct {
		name         string
		wild         bool
		maxFallbacks float64 // share of calls
	}{
		{"moderate", false, 0},
		{"wild", true, 0.85},
	} {
		for _, alg := range chargers() {
			t.Run("regime="+regime.name+"/algo="+alg.Name(), func(t *testing.T) {
				clock := &manualClock{}
				prefix := randomPrefix(t)
				st := clockedStore(t, c, clock, prefix)
				steps, charges := 0, 0
				for seq := range 40 {
					l := moderateLimit(r, alg)
					if regime.wild {
						l = randomLimit(r, alg)
					}
					key := fmt.Sprintf("k%d", seq)
					clock.ns = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano() + r.Int64N(int64(365*24*time.Hour))
					var state []byte
					var history []string
					// storedReset is the ResetAfter of the stored state when it
					// was written: how far it was from full then
					var storedReset time.Duration
					for range 40 {
						clock.ns = step(r, clock.ns, l)
						op, cost := ratelimit.OpCharge, chargeAmount(r, l, regime.wild)
						if r.IntN(3) == 0 {
							op, cost = ratelimit.OpTake, r.Int64N(l.Burst+1)
						} else {
							charges++
						}
						want, next, err := ratelimit.Evaluate(alg, op, state, clock.ns, l, cost, 0, nil)
						if err != nil {
							t.Fatal(err)
						}
						history = append(history, fmt.Sprintf("now=%d %s cost=%d -> %+v", clock.ns, op, cost, want))
						_, fb0 := st.NativeCounts()
						before := storedState(t, c, prefix)
						got, err := st.Apply(t.Context(), ratelimit.Check{Namespace: "g", Key: key, Algorithm: alg, Limit: l, Cost: cost, Op: op})
						if err != nil {
							t.Fatalf("limit %+v: %v", l, err)
						}
						if _, fb := st.NativeCounts(); fb != fb0 && max(storedReset, want.ResetAfter) < 1<<51 {
							t.Fatalf("limit %+v, history:\n%s\nfell back with ResetAfter %d before and %d after, both below 2^51 ns; state %x", l, joinLines(history), storedReset, want.ResetAfter, before)
						}
						if got != want {
							t.Fatalf("limit %+v, history:\n%s\ngot  %+v\nwant %+v", l, joinLines(history), got, want)
						}
						if want.Changed {
							state, storedReset = next, want.ResetAfter
						}
						if stored := storedState(t, c, prefix); (want.Changed || op == ratelimit.OpCharge) && string(stored) != string(state) {
							t.Fatalf("limit %+v, history:\n%s\nstored state %x, Go state %x", l, joinLines(history), stored, state)
						}
						steps++
					}
					if err := st.Reset(t.Context(), "g", key); err != nil {
						t.Fatal(err)
					}
				}
				calls, fallbacks := st.NativeCounts()
				if calls != int64(steps) {
					t.Fatalf("%d native calls for %d steps", calls, steps)
				}
				if float64(fallbacks) > regime.maxFallbacks*float64(calls) {
					t.Fatalf("%d of %d calls fell back to the generic path; at most %.0f%% allowed", fallbacks, calls, 100*regime.maxFallbacks)
				}
				t.Logf("%d steps (%d charges), %d generic fallbacks", steps, charges, fallbacks)
			})
		}
	}
}

// be appends each value as a big-endian int64, the state encodings' form.
func be(b []byte, vs ...int64) []byte {
	for _, v := range vs {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	return b
}

// TestNativeChargeEdges charges hand-made states at their edges (the
// deepest debt, counts above Burst carried over several windows or met
// years later, a clock behind the state, counts at native.lua's 2^51
// bound) and checks the outcome and the stored state against the Go
// algorithm, and whether the script decided or fell back.
func TestNativeChargeEdges(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv.addr())
	now := time.Date(2026, 7, 1, 0, 0, 0, 123, time.UTC).UnixNano()
	sec := ratelimit.Every(time.Second, 4)
	// unit: one unit per ns, so MaxDebt is 2^50 and repaying it takes
	// 2^50 ns, inside the script's range
	unit := ratelimit.Limit{Count: 1, Period: 1, Burst: 1}
	// thirds: 3 units per 2 ns, spans with remainders
	thirds := ratelimit.Limit{Count: 3, Period: 2, Burst: 3}
	long := ratelimit.Limit{Count: 2, Period: 1 << 51, Burst: 2}
	md := arith.MaxDebt(unit)
	tests := []struct {
		name     string
		alg      ratelimit.Algorithm
		limit    ratelimit.Limit
		state    []byte
		amount   int64
		fallback bool
	}{
		{"gcra/no state, peek", gcra.New(), sec, nil, 0, false},
		{"gcra/no state, 1", gcra.New(), sec, nil, 1, false},
		{"gcra/peek in debt", gcra.New(), sec, be([]byte{gcra.Tag}, now+int64(time.Second), 0), 0, false},
		{"gcra/MaxCost, a span over 2^52 ns", gcra.New(), sec, nil, ratelimit.MaxCost, true},
		{"gcra/at the deepest debt", gcra.New(), unit, be([]byte{gcra.Tag}, now+md, 0), 1, false},
		{"gcra/to the deepest debt", gcra.New(), unit, be([]byte{gcra.Tag}, now+md-5, 0), 9, false},
		{"gcra/deepest debt with remainders", gcra.New(), thirds, be([]byte{gcra.Tag}, now+muldiv.Floor(arith.MaxDebt(thirds), 2, 3)-1, 2), ratelimit.MaxCost, false},
		{"gcra/clock behind", gcra.New(), sec, be([]byte{gcra.Tag}, now+int64(time.Hour), 1), 3, false},
		{"tokenbucket/peek, no state", tokenbucket.New(), sec, nil, 0, false},
		{"tokenbucket/at the deepest debt", tokenbucket.New(), unit, be([]byte{tokenbucket.Tag}, -md, 0, now), 1, false},
		{"tokenbucket/past the deepest debt", tokenbucket.New(), unit, be([]byte{tokenbucket.Tag}, 5-md, 0, now-2), ratelimit.MaxCost, false},
		{"tokenbucket/debt met years later", tokenbucket.New(), sec, be([]byte{tokenbucket.Tag}, -1000, 7, now-int64(3*365*24*time.Hour)), 2, false},
		{"tokenbucket/clock behind, in debt", tokenbucket.New(), sec, be([]byte{tokenbucket.Tag}, -3, 5, now+int64(time.Minute)), 2, false},
		{"tokenbucket/debt beyond 2^52 ns", tokenbucket.New(), sec, nil, ratelimit.MaxCost, true},
		{"leakybucket/at the deepest debt", leakybucket.New(), unit, be([]byte{leakybucket.Tag}, unit.Burst+md, 0, now), 1, false},
		{"leakybucket/peek over Burst", leakybucket.New(), sec, be([]byte{leakybucket.Tag}, 9, 0, now), 0, false},
		{"fixedwindow/peek, no state", fixedwindow.New(), sec, nil, 0, false},
		{"fixedwindow/over Burst in the window", fixedwindow.New(), sec, be([]byte{fixedwindow.Tag}, now-100, 9), 5, false},
		{"fixedwindow/carried three windows on", fixedwindow.New(), sec, be([]byte{fixedwindow.Tag}, now-int64(3*time.Second)-7, 30), 1, false},
		{"fixedwindow/carried off", fixedwindow.New(), sec, be([]byte{fixedwindow.Tag}, now-int64(9*time.Second), 30), 0, false},
		{"fixedwindow/carried count met years later", fixedwindow.New(), sec, be([]byte{fixedwindow.Tag}, now-int64(3*365*24*time.Hour), 3000), 2, false},
		{"fixedwindow/carried count met 2^52 ns later, not yet off", fixedwindow.New(), long, be([]byte{fixedwindow.Tag}, now-1<<52-1<<40, 3*2+1), 1, true},
		{"fixedwindow/negative count", fixedwindow.New(), sec, be([]byte{fixedwindow.Tag}, now-5, -4), 2, false},
		{"fixedwindow/clock behind, over Burst", fixedwindow.New(), sec, be([]byte{fixedwindow.Tag}, now+int64(time.Second), 6), 1, false},
		{"fixedwindow/count at 2^51", fixedwindow.New(), sec, be([]byte{fixedwindow.Tag}, now-5, 1<<51), 1, true},
		{"fixedwindow/up to the largest carried count", fixedwindow.New(), long, nil, ratelimit.MaxCost, true},
		{"slidingwindow/peek, no state", slidingwindow.New(), sec, nil, 0, false},
		{"slidingwindow/both counts over Burst", slidingwindow.New(), sec, be([]byte{slidingwindow.Tag}, now-100, 50, 70), 3, false},
		{"slidingwindow/previous window over Burst", slidingwindow.New(), sec, be([]byte{slidingwindow.Tag}, now-int64(1500*time.Millisecond), 50, 70), 0, false},
		{"slidingwindow/MaxCost", slidingwindow.New(), sec, nil, ratelimit.MaxCost, false},
		{"slidingwindow/count near 2^51", slidingwindow.New(), sec, be([]byte{slidingwindow.Tag}, now-100, 1<<51-2, 0), 5, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkEdge(t, c, now, edgeCase{alg: tt.alg, op: ratelimit.OpCharge, limit: tt.limit, state: tt.state, cost: tt.amount, fallback: tt.fallback})
		})
	}
}

// TestNativeChargeComposite checks ApplyAll's all-or-nothing rule with
// charges on the native path, against the memory store: charges alone are
// never denied, whatever debt they leave; a charge beside a denied take
// writes nothing, though its outcome is reported as the Go stores report
// it; beside allowed takes it applies, in order with the other checks on
// its key.
func TestNativeChargeComposite(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv.addr())
	start := time.Date(2026, 8, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	l := ratelimit.Every(time.Second, 4)
	for _, alg := range chargers() {
		t.Run("algo="+alg.Name(), func(t *testing.T) {
			clock := &manualClock{ns: start}
			prefix := randomPrefix(t)
			st := clockedStore(t, c, clock, prefix)
			mem := clockedMemory(t, clock)
			check := func(key string, op ratelimit.Op, cost int64) ratelimit.Check {
				return ratelimit.Check{Namespace: "m", Key: "{t}" + key, Algorithm: alg, Limit: l, Cost: cost, Op: op}
			}
			charge := func(key string, n int64) ratelimit.Check { return check(key, ratelimit.OpCharge, n) }
			take := func(key string, n int64) ratelimit.Check { return check(key, ratelimit.OpTake, n) }
			steps := []struct {
				name    string
				checks  []ratelimit.Check
				allowed bool
				// written lists the keys the step must change
				written []string
			}{
				{"charges alone, into debt", []ratelimit.Check{charge("a", 3), charge("b", 9), charge("a", 2)}, true, []string{"a", "b"}},
				{"charges alone, deeper, and a peek", []ratelimit.Check{charge("b", 40), charge("a", 0)}, true, []string{"b"}},
				{"a denied take voids a charge", []ratelimit.Check{charge("c", 2), take("a", 1)}, false, nil},
				{"a denied peek voids a charge", []ratelimit.Check{take("b", 0), charge("c", 1)}, false, nil},
				{"an allowed take and a charge on its key", []ratelimit.Check{take("c", 1), charge("c", 1), charge("d", 7)}, true, []string{"c", "d"}},
				{"a charge making a later take on its key denied", []ratelimit.Check{charge("e", 3), take("e", 2)}, false, nil},
				{"a take the charge after it cannot undo", []ratelimit.Check{take("e", 4), charge("e", 100)}, true, []string{"e"}},
			}
			for i, s := range steps {
				clock.ns += int64(time.Millisecond)
				before := map[string]string{}
				for _, k := range []string{"a", "b", "c", "d", "e"} {
					v, _ := c.Get(t.Context(), st.RedisKey("m", "{t}"+k)).Result()
					before[k] = v
				}
				got := make([]ratelimit.Outcome, len(s.checks))
				want := make([]ratelimit.Outcome, len(s.checks))
				gotOK, err := st.ApplyAll(t.Context(), s.checks, got)
				if err != nil {
					t.Fatal(err)
				}
				wantOK, err := mem.ApplyAll(t.Context(), s.checks, want)
				if err != nil {
					t.Fatal(err)
				}
				if gotOK != s.allowed || wantOK != s.allowed {
					t.Fatalf("step %d (%s): allowed %v, memory store %v, want %v", i, s.name, gotOK, wantOK, s.allowed)
				}
				for j := range got {
					if got[j] != want[j] {
						t.Fatalf("step %d (%s) check %d: got %+v, memory store %+v", i, s.name, j, got[j], want[j])
					}
				}
				for k, v := range before {
					now, _ := c.Get(t.Context(), st.RedisKey("m", "{t}"+k)).Result()
					written := false
					for _, w := range s.written {
						written = written || w == k
					}
					if (now != v) != written {
						t.Fatalf("step %d (%s): key %s went from %x to %x; want written %v", i, s.name, k, v, now, written)
					}
				}
			}
			if calls, fallbacks := st.NativeCounts(); calls != int64(len(steps)) || fallbacks != 0 {
				t.Fatalf("%d native calls, %d fallbacks; want %d and 0", calls, fallbacks, len(steps))
			}
		})
	}
}

// TestNativeChargeSlidingLog: the sliding log has no Charge. A charge of
// it, alone or beside native checks, takes the generic path and returns
// ratelimit.ErrUnsupported without touching any state.
func TestNativeChargeSlidingLog(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv.addr())
	clock := &manualClock{ns: time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC).UnixNano()}
	prefix := randomPrefix(t)
	st, err := redisstore.New(c, redisstore.WithPrefix(prefix), redisstore.WithTestClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	l := ratelimit.Every(time.Second, 4)
	logTake := ratelimit.Check{Namespace: "s", Key: "{u}log", Algorithm: slidinglog.New(), Limit: l, Cost: 1}
	if _, err := st.Apply(t.Context(), logTake); err != nil {
		t.Fatal(err)
	}
	before := storedKeys(t, st, c, "{u}log", "{u}tb")
	logCharge := logTake
	logCharge.Op, logCharge.Cost = ratelimit.OpCharge, 2
	tbCharge := ratelimit.Check{Namespace: "s", Key: "{u}tb", Algorithm: tokenbucket.New(), Limit: l, Cost: 2, Op: ratelimit.OpCharge}
	for _, tt := range []struct {
		name   string
		checks []ratelimit.Check
	}{
		{"alone", []ratelimit.Check{logCharge}},
		{"after a native charge", []ratelimit.Check{tbCharge, logCharge}},
		{"amount 0", []ratelimit.Check{{Namespace: "s", Key: "{u}log", Algorithm: slidinglog.New(), Limit: l, Op: ratelimit.OpCharge}}},
	} {
		out := make([]ratelimit.Outcome, len(tt.checks))
		if _, err := st.ApplyAll(t.Context(), tt.checks, out); !errors.Is(err, ratelimit.ErrUnsupported) {
			t.Fatalf("%s: error %v, want ErrUnsupported", tt.name, err)
		}
		if after := storedKeys(t, st, c, "{u}log", "{u}tb"); after != before {
			t.Fatalf("%s: state went from %q to %q", tt.name, before, after)
		}
	}
	if _, err := st.Apply(t.Context(), logCharge); !errors.Is(err, ratelimit.ErrUnsupported) {
		t.Fatalf("Apply: error %v, want ErrUnsupported", err)
	}
	// Only the first take ran native.lua.
	if calls, fallbacks := st.NativeCounts(); calls != 1 || fallbacks != 0 {
		t.Fatalf("%d native calls, %d fallbacks; want 1 and 0", calls, fallbacks)
	}
}

// storedKeys returns the stored values of keys in namespace "s", joined.
func storedKeys(t *testing.T, st *redisstore.Store, c *redis.Client, keys ...string) string {
	t.Helper()
	s := ""
	for _, k := range keys {
		v, err := c.Get(t.Context(), st.RedisKey("s", k)).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		s += fmt.Sprintf("%s=%x;", k, v)
	}
	return s
}

// BenchmarkCharge measures one charge on one hot key against a local
// redis-server, one caller at a time: native.lua's charge against the
// generic path's read, decision in Go and compare-and-set.
func BenchmarkCharge(b *testing.B) {
	srv := startServer(b)
	lim := ratelimit.PerSecond(1_000_000) // one unit a call never runs into debt
	for _, alg := range chargers() {
		for _, path := range []string{"native", "generic"} {
			b.Run(fmt.Sprintf("backend=redis/op=charge/algo=%s/path=%s", alg.Name(), path), func(b *testing.B) {
				c := newClient(b, srv.addr())
				opts := []redisstore.Option{redisstore.WithPrefix(randomPrefix(b))}
				if path == "generic" {
					opts = append(opts, redisstore.WithoutNativeScripts())
				}
				st, err := redisstore.New(c, opts...)
				if err != nil {
					b.Fatal(err)
				}
				check := ratelimit.Check{Namespace: "b", Key: "hot", Algorithm: alg, Limit: lim, Cost: 1, Op: ratelimit.OpCharge}
				b.ReportAllocs()
				for b.Loop() {
					if _, err := st.Apply(b.Context(), check); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
