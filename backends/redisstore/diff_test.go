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
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/algorithms/leakybucket"
	"github.com/sluicehq/sluice/algorithms/slidinglog"
	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/backends/redisstore"
	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/muldiv"
)

// manualClock is an injected clock for WithTestClock.
type manualClock struct{ ns int64 }

func (c *manualClock) Now() int64 { return c.ns }

// clockedStore returns a store on c under prefix whose clock is clock,
// with a TTL margin of an hour so no key expires while the test moves the
// clock.
func clockedStore(t *testing.T, c redisstore.Client, clock *manualClock, prefix string) *redisstore.Store {
	t.Helper()
	st, err := redisstore.New(c, redisstore.WithPrefix(prefix), redisstore.WithTestClock(clock), redisstore.WithTTLMargin(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// clockedMemory returns a memory store whose clock is clock.
func clockedMemory(t *testing.T, clock *manualClock) *memstore.Store {
	t.Helper()
	mem, err := memstore.New(memstore.WithClock(ratelimit.ClockFunc(clock.Now)))
	if err != nil {
		t.Fatal(err)
	}
	return mem
}

// randomLimit returns a valid limit inside the native path's bounds
// (Period and FillTime at most 2^51 ns), often near an edge, that alg
// accepts (nil: any algorithm). A window algorithm refuses a window
// Burst·Period/Count that is not whole, so for it Burst is rounded up to a
// multiple of Count/gcd(Count, Period) when needed.
func randomLimit(r *rand.Rand, alg ratelimit.Algorithm) ratelimit.Limit {
	const span = 1 << 51
	v, _ := alg.(ratelimit.LimitValidator)
	for {
		var l ratelimit.Limit
		switch r.IntN(5) {
		case 0: // everyday limits: per second to per day
			periods := []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour}
			l = ratelimit.Limit{Count: 1 + r.Int64N(100000), Period: periods[r.IntN(len(periods))], Burst: 1 + r.Int64N(100000)}
		case 1: // odd periods, counts that do not divide them
			l = ratelimit.Limit{Count: 1 + r.Int64N(1<<20), Period: time.Duration(1 + r.Int64N(1<<40)), Burst: 1 + r.Int64N(1<<20)}
		case 2: // FillTime just below 2^51, huge products Burst·Period
			c := 1 + r.Int64N(ratelimit.MaxCount)
			p := 1 + r.Int64N(span)
			l = ratelimit.Limit{Count: c, Period: time.Duration(p), Burst: max(1, min(ratelimit.MaxCount, muldiv.Floor(span, c, p)-r.Int64N(3)))}
		case 3: // Period exactly 2^51, huge counts
			l = ratelimit.Limit{Count: ratelimit.MaxCount - r.Int64N(1000), Period: span, Burst: 1 + r.Int64N(ratelimit.MaxCount)}
		default: // tiny
			l = ratelimit.Limit{Count: 1 + r.Int64N(5), Period: time.Duration(1 + r.Int64N(10)), Burst: 1 + r.Int64N(5)}
		}
		if v != nil && v.ValidateLimit(l) != nil {
			step := l.Count / gcd(l.Count, int64(l.Period))
			l.Burst = (l.Burst + step - 1) / step * step
		}
		if l.Validate() == nil && l.Period <= span && l.FillTime() <= span && (v == nil || v.ValidateLimit(l) == nil) {
			return l
		}
	}
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// TestNativeBounds checks which limits take the native path: inside the
// bounds it decides without falling back, outside it is never called.
func TestNativeBounds(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv.addr())
	for _, tt := range []struct {
		limit  ratelimit.Limit
		native bool
	}{
		{ratelimit.PerSecond(10), true},
		{ratelimit.PerHour(1000), true},
		{ratelimit.Every(24*time.Hour, 100000), true},
		{ratelimit.Limit{Count: ratelimit.MaxCount, Period: 1 << 51, Burst: ratelimit.MaxCount}, true},
		{ratelimit.Every(30*24*time.Hour, 10), false},                      // Period over 2^51 ns
		{ratelimit.Limit{Count: 1, Period: time.Hour, Burst: 1000}, false}, // FillTime 1000 h
	} {
		st, err := redisstore.New(c, redisstore.WithPrefix(randomPrefix(t)))
		if err != nil {
			t.Fatal(err)
		}
		algs := catalog.All()
		for _, alg := range algs {
			for range 3 {
				if _, err := st.Apply(t.Context(), ratelimit.Check{Namespace: alg.Name(), Key: "k", Algorithm: alg, Limit: tt.limit, Cost: 1}); err != nil {
					t.Fatal(err)
				}
			}
		}
		calls, fallbacks := st.NativeCounts()
		want := int64(0)
		if tt.native {
			want = int64(3 * len(algs))
		}
		if calls != want || fallbacks != 0 {
			t.Errorf("limit %v: %d native calls, %d fallbacks; want %d and 0", tt.limit, calls, fallbacks, want)
		}
	}
}

// step returns the next instant: mostly small advances, sometimes a jump
// backwards (a clock that went back) or years forwards.
func step(r *rand.Rand, now int64, l ratelimit.Limit) int64 {
	switch r.IntN(10) {
	case 0: // at most 2^48 ns back, so states rarely end up more than 2^51 ns ahead (those fall back)
		return now - r.Int64N(min(int64(l.Period), 1<<48)+1)
	case 1:
		return now + r.Int64N(10*365*24*int64(time.Hour))
	case 2:
		return now
	default:
		return now + r.Int64N(max(1, l.FillTime().Nanoseconds()/l.Burst)*3+1)
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
	for _, alg := range catalog.All() {
		t.Run("algo="+alg.Name(), func(t *testing.T) {
			clock := &manualClock{}
			prefix := randomPrefix(t)
			st := clockedStore(t, c, clock, prefix)
			steps := 0
			for seq := range 60 {
				l := randomLimit(r, alg)
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
// algorithms, repeated keys, reservations, refunds and charges among the
// takes) on the native path with the embedded memory store at the same
// injected instants: the outcomes, the all-or-nothing verdict (a denied
// take voids the charges beside it; charges alone always apply) and so,
// step after step, the states.
func TestNativeCompositeMatchesMemory(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv.addr())
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 2))
	clock := &manualClock{ns: time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC).UnixNano()}
	st := clockedStore(t, c, clock, randomPrefix(t))
	mem := clockedMemory(t, clock)
	algs := catalog.All()
	limits := []ratelimit.Limit{randomLimit(r, nil), randomLimit(r, nil), ratelimit.PerSecond(5), ratelimit.Every(time.Minute, 3).WithBurst(4), ratelimit.Every(time.Second, 6), ratelimit.Every(300*time.Millisecond, 4)}
	for i := range 300 {
		clock.ns += r.Int64N(int64(200 * time.Millisecond))
		n := 1 + r.IntN(4)
		checks := make([]ratelimit.Check, n)
		for j := range checks {
			k := r.IntN(len(algs))
			checks[j] = ratelimit.Check{Namespace: "c", Key: fmt.Sprintf("{x}%d", k), Algorithm: algs[k], Limit: limits[k], Cost: r.Int64N(3)}
			switch r.IntN(5) {
			case 0: // gcra, tokenbucket, leakybucket: reservations and refunds are native too
				if k <= 2 {
					checks[j].Op, checks[j].MaxWait = ratelimit.OpReserve, time.Duration(r.Int64N(int64(time.Second)))
				}
			case 1:
				if k <= 2 {
					checks[j].Op = ratelimit.OpRefund
				}
			case 2:
				// Every algorithm but slidinglog charges natively, 0 to 3
				// Bursts. Debts here pile up over the steps (the clock
				// advances 100 ms a step on average), so charges are
				// limited to limits refilled within an hour: the debt then
				// stays repayable within 2^51 ns, and no call falls back.
				if k <= 4 && limits[k].FillTime() <= time.Hour {
					checks[j].Op, checks[j].Cost = ratelimit.OpCharge, r.Int64N(3*limits[k].Burst+1)
				}
			}
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

// TestNativeFallback: a state more than 2^51 ns ahead of "now" (a clock
// far behind) is beyond native.lua's exact range; the script writes
// nothing and the generic path decides, with the Go algorithm's result.
func TestNativeFallback(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv.addr())
	for _, alg := range catalog.All() {
		t.Run("algo="+alg.Name(), func(t *testing.T) {
			start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).UnixNano()
			clock := &manualClock{ns: start}
			st := clockedStore(t, c, clock, randomPrefix(t))
			l := ratelimit.Every(24*time.Hour, 10)
			check := ratelimit.Check{Namespace: "f", Key: "k", Algorithm: alg, Limit: l, Cost: 3}
			var state []byte
			for i, now := range []int64{start, start - 1<<52, start - 1<<52 + 1} {
				clock.ns = now
				want, next, err := alg.Decide(state, now, l, check.Cost, nil)
				if err != nil {
					t.Fatal(err)
				}
				if want.Changed {
					state = next
				}
				got, err := st.Apply(t.Context(), check)
				if err != nil || got != want {
					t.Fatalf("step %d: got %+v %v, want %+v", i, got, err, want)
				}
			}
			// Both calls behind the state (denied, except by the sliding
			// log, whose quota is not used up) fall back; the first call is
			// native.
			if calls, fallbacks := st.NativeCounts(); calls != 3 || fallbacks != 2 {
				t.Fatalf("%d native calls, %d fallbacks; want 3 and 2", calls, fallbacks)
			}
		})
	}
}

// TestNativeAfterCharge: a charge beyond Burst leaves a state in debt (a
// count above Burst, carried over into later windows by fixedwindow).
// native.lua decides the charge and every take after it, the debt
// included, with the Go algorithm's outcomes and no fallback.
func TestNativeAfterCharge(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv.addr())
	l := ratelimit.Every(time.Second, 4)
	steps := []struct {
		at   time.Duration
		op   ratelimit.Op
		cost int64
	}{
		{0, ratelimit.OpTake, 1},
		{0, ratelimit.OpCharge, 3 * l.Burst},
		{time.Millisecond, ratelimit.OpTake, 1}, // denied in debt
		{time.Millisecond, ratelimit.OpTake, 0}, // peek in debt
		{time.Hour, ratelimit.OpTake, 1},        // repaid, but the stored state still shows the debt
		{time.Hour, ratelimit.OpTake, 1},        // a state the script decides
	}
	for _, alg := range chargers() {
		t.Run("algo="+alg.Name(), func(t *testing.T) {
			start := time.Date(2026, 4, 1, 0, 0, 0, 500, time.UTC).UnixNano()
			clock := &manualClock{}
			st, err := redisstore.New(c, redisstore.WithPrefix(randomPrefix(t)), redisstore.WithTestClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			var state []byte
			for i, s := range steps {
				clock.ns = start + int64(s.at)
				want, next, err := ratelimit.Evaluate(alg, s.op, state, clock.ns, l, s.cost, 0, nil)
				if err != nil {
					t.Fatal(err)
				}
				if want.Changed {
					state = next
				}
				got, err := st.Apply(t.Context(), ratelimit.Check{Namespace: "c", Key: "k", Algorithm: alg, Limit: l, Cost: s.cost, Op: s.op})
				if err != nil || got != want {
					t.Fatalf("step %d (%s %d): got %+v %v, want %+v", i, s.op, s.cost, got, err, want)
				}
			}
			if calls, fallbacks := st.NativeCounts(); calls != int64(len(steps)) || fallbacks != 0 {
				t.Fatalf("%d native calls, %d fallbacks; want %d and 0", calls, fallbacks, len(steps))
			}
		})
	}
}

// TestNativeSlidingLogStates stores hand-made sliding log states, some
// outside native.lua's exact range, and checks each take against the Go
// algorithm on the same state: the outcome, the stored state, and whether
// the script decided or fell back to the generic path.
func TestNativeSlidingLogStates(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv.addr())
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	l := ratelimit.Every(time.Minute, 5)
	// logState encodes base and (delta, count) pairs, each as a uvarint.
	logState := func(base int64, pairs ...uint64) []byte {
		b := binary.BigEndian.AppendUint64([]byte{slidinglog.Tag}, uint64(base))
		for _, v := range pairs {
			b = binary.AppendUvarint(b, v)
		}
		return b
	}
	tests := []struct {
		name     string
		state    []byte
		cost     int64
		fallback bool
	}{
		{"live entries, one at now", logState(now-int64(30*time.Second), 0, 1, uint64(30*time.Second), 2), 1, false},
		{"expired and live", logState(now-int64(90*time.Second), 0, 2, uint64(70*time.Second), 2), 2, false},
		{"quota used up", logState(now-int64(10*time.Second), 0, 3, 5, 2), 1, false},
		{"peek, quota used up", logState(now-int64(10*time.Second), 0, 3, 5, 2), 0, false},
		{"clock behind the newest entry", logState(now+int64(time.Second), 0, 2), 2, false},
		{"non-minimal varint", []byte{slidinglog.Tag, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x00, 0x81, 0x00}, 1, false},
		{"base years ago, small gaps", logState(now-int64(20*365*24*time.Hour), 0, 1, 7, 1), 1, false},
		{"base years ago, gaps over 2^51", logState(now-int64(20*365*24*time.Hour), 0, 1, 1<<51-1, 1, 1<<51-1, 1), 1, true},
		{"gap of 2^52", logState(now-int64(time.Hour), 0, 1, 1<<52, 1), 1, true},
		{"count of 2^52", logState(now-int64(time.Second), 0, 1<<52), 0, true},
		{"base 2^53 ns ahead", logState(now+1<<53, 0, 1), 1, true},
		{"truncated varint", logState(now, 0, 1, 0x80)[:12], 1, true},
		{"count 0", logState(now, 0, 0), 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkEdge(t, c, now, edgeCase{alg: slidinglog.New(), op: ratelimit.OpTake, limit: l, state: tt.state, cost: tt.cost, fallback: tt.fallback})
		})
	}
}

// edgeCase is one hand-made state decided once on the native path.
type edgeCase struct {
	alg   ratelimit.Algorithm
	op    ratelimit.Op
	limit ratelimit.Limit
	// state is stored before the call; nil stores none.
	state []byte
	cost  int64
	// fallback says whether native.lua must hand the call to the
	// generic path.
	fallback bool
}

// checkEdge stores tc.state, applies one check at now through a fresh
// store and compares it with ratelimit.Evaluate on the same state: the
// error (ratelimit.ErrCorruptState on both sides, or none), the outcome,
// the stored state byte for byte, and whether native.lua decided or fell
// back.
func checkEdge(t *testing.T, c *redis.Client, now int64, tc edgeCase) {
	t.Helper()
	st, err := redisstore.New(c, redisstore.WithPrefix(randomPrefix(t)), redisstore.WithTestClock(&manualClock{ns: now}), redisstore.WithTTLMargin(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	rk := st.RedisKey("e", "k")
	if tc.state != nil {
		if err := c.Set(t.Context(), rk, tc.state, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	want, next, wantErr := ratelimit.Evaluate(tc.alg, tc.op, tc.state, now, tc.limit, tc.cost, 0, nil)
	got, err := st.Apply(t.Context(), ratelimit.Check{Namespace: "e", Key: "k", Algorithm: tc.alg, Limit: tc.limit, Cost: tc.cost, Op: tc.op})
	if (err != nil) != (wantErr != nil) || (err != nil && !errors.Is(err, ratelimit.ErrCorruptState)) {
		t.Fatalf("error %v, Go algorithm's %v", err, wantErr)
	}
	if got != want {
		t.Fatalf("got %+v, Go algorithm %+v", got, want)
	}
	wantState := tc.state
	if want.Changed {
		wantState = next
	}
	stored, err := c.Get(t.Context(), rk).Bytes()
	if errors.Is(err, redis.Nil) && len(wantState) == 0 {
		err = nil
	}
	if err != nil || string(stored) != string(wantState) {
		t.Fatalf("stored %x, %v; want %x (state before %x)", stored, err, wantState, tc.state)
	}
	calls, fallbacks := st.NativeCounts()
	if calls != 1 || (fallbacks == 1) != tc.fallback {
		t.Fatalf("%d native calls, %d fallbacks; want 1 call, fallback %v", calls, fallbacks, tc.fallback)
	}
}

// TestNativeReserveMatchesGo is the differential test of native.lua's
// reservations, refunds and charges of gcra, tokenbucket and leakybucket:
// random sequences of takes, reservations (with random MaxWait), refunds
// and charges (which leave states in debt for the calls after them) at
// injected instants against ratelimit.Evaluate on the Go algorithm,
// comparing every outcome field, Delay included, and the stored state
// byte for byte.
func TestNativeReserveMatchesGo(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv.addr())
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 3))
	ops := []ratelimit.Op{ratelimit.OpTake, ratelimit.OpReserve, ratelimit.OpReserve, ratelimit.OpRefund, ratelimit.OpCharge}
	for _, alg := range []ratelimit.Algorithm{gcra.New(), tokenbucket.New(), leakybucket.New()} {
		t.Run("algo="+alg.Name(), func(t *testing.T) {
			clock := &manualClock{}
			prefix := randomPrefix(t)
			st := clockedStore(t, c, clock, prefix)
			nativeSteps := 0
			for seq := range 60 {
				l := randomLimit(r, alg)
				key := fmt.Sprintf("k%d", seq)
				clock.ns = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano() + r.Int64N(int64(365*24*time.Hour))
				var state []byte
				var history []string
				for range 40 {
					clock.ns = step(r, clock.ns, l)
					op := ops[r.IntN(len(ops))]
					cost := r.Int64N(l.Burst + 1)
					switch r.IntN(8) {
					case 0:
						cost = 0
					case 1:
						cost = min(l.Burst+1+r.Int64N(3), ratelimit.MaxCost)
					case 2:
						cost = 1
					case 3:
						cost = ratelimit.MaxCost - r.Int64N(2)
					}
					if op == ratelimit.OpCharge && r.IntN(4) > 0 {
						// mostly a debt the native path decides; sometimes
						// one too deep for it
						cost = min(r.Int64N(2*l.Burst+1), ratelimit.MaxCost)
					}
					var maxWait time.Duration
					switch r.IntN(4) {
					case 0:
					case 1:
						maxWait = time.Duration(1<<63 - 1)
					default:
						maxWait = time.Duration(r.Int64N(2*max(1, l.FillTime().Nanoseconds())) + 1)
					}
					if op != ratelimit.OpReserve {
						maxWait = 0
					}
					want, next, err := ratelimit.Evaluate(alg, op, state, clock.ns, l, cost, maxWait, nil)
					if err != nil {
						t.Fatal(err)
					}
					history = append(history, fmt.Sprintf("now=%d %s cost=%d maxWait=%d -> %+v", clock.ns, op, cost, maxWait, want))
					got, err := st.Apply(t.Context(), ratelimit.Check{Namespace: "r", Key: key, Algorithm: alg, Limit: l, Cost: cost, Op: op, MaxWait: maxWait})
					if err != nil {
						t.Fatalf("limit %+v: %v", l, err)
					}
					if got != want {
						t.Fatalf("limit %+v, history:\n%s\ngot  %+v\nwant %+v", l, joinLines(history), got, want)
					}
					if want.Changed {
						state = next
					}
					if stored := storedState(t, c, prefix); want.Changed && string(stored) != string(state) {
						t.Fatalf("limit %+v, history:\n%s\nstored state %x, Go state %x", l, joinLines(history), stored, state)
					}
					nativeSteps++
				}
				if err := st.Reset(t.Context(), "r", key); err != nil {
					t.Fatal(err)
				}
			}
			calls, fallbacks := st.NativeCounts()
			if calls != int64(nativeSteps) {
				t.Fatalf("%d native calls for %d steps", calls, nativeSteps)
			}
			// Debts whose repayment takes over 2^51 ns (MaxDebt allows up
			// to MaxWindowSpan) fall back until repaid, and so do gcra
			// charges of 2^52 ns or more; reservations and charges here
			// run deep often (a quarter of the charges draw from the
			// takes' costs, which reach MaxCost); most calls must still be
			// native.
			if fallbacks*2 > calls {
				t.Fatalf("%d of %d calls fell back to the generic path", fallbacks, calls)
			}
			t.Logf("%d native calls, %d generic fallbacks", calls, fallbacks)
		})
	}
}
