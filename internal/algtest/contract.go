package algtest

import (
	"bytes"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// base is the first instant of Edges, Allocs and Concurrent: a recent
// date, far from both int64 limits.
const base = int64(1_790_000_000) * int64(time.Second)

// Fataler is the failure reporter shared by testing.T and rapid.T.
type Fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// CheckOutcome checks the invariants every single outcome of Decide
// satisfies; what describes the call in a failure.
func CheckOutcome(f Fataler, what string, state []byte, l ratelimit.Limit, cost int64, o ratelimit.Outcome, out []byte) {
	f.Helper()
	switch {
	case o.Remaining < 0 || o.Remaining > l.Burst:
		f.Fatalf("%s: Remaining %d outside 0..Burst %d", what, o.Remaining, l.Burst)
	case o.RetryAfter < 0 || o.ResetAfter < 0 || o.TTL < 0 || o.Delay < 0:
		f.Fatalf("%s: negative duration in %+v", what, o)
	case o.Delay != 0:
		f.Fatalf("%s: Decide reported Delay %s, want 0", what, o.Delay)
	case o.Allowed && o.RetryAfter != 0:
		f.Fatalf("%s: allowed with RetryAfter %s, want 0", what, o.RetryAfter)
	case o.Changed == bytes.Equal(state, out):
		f.Fatalf("%s: Changed = %t but state %x became %x", what, o.Changed, state, out)
	case cost == 0 && o.Changed:
		f.Fatalf("%s: a peek (cost 0) changed the state %x to %x", what, state, out)
	case cost > l.Burst && (o.Allowed || o.RetryAfter != ratelimit.Never || o.Changed):
		f.Fatalf("%s: cost %d above Burst %d gave %+v, want denied, RetryAfter Never, unchanged", what, cost, l.Burst, o)
	case !o.Allowed && o.Changed:
		f.Fatalf("%s: a denial changed the state %x to %x", what, state, out)
	case !o.Allowed && cost <= l.Burst && o.RetryAfter == 0:
		f.Fatalf("%s: denied with RetryAfter 0: waiting 0 cannot admit the same cost", what)
	}
}

// EdgeLimits are the extreme valid limits Edges drives.
var EdgeLimits = []ratelimit.Limit{
	{Count: 1, Period: 1, Burst: 1},
	{Count: ratelimit.MaxCount, Period: 1, Burst: ratelimit.MaxCount},
	{Count: ratelimit.MaxCount, Period: ratelimit.MaxPeriod, Burst: ratelimit.MaxCount},
	{Count: 1, Period: ratelimit.MaxPeriod, Burst: 10},
	{Count: 1, Period: 1, Burst: ratelimit.MaxCount},
	{Count: ratelimit.MaxCount, Period: ratelimit.MaxPeriod, Burst: 1},
}

// edgeInstants are extreme instants, in the order they are visited: going
// forward to the end of time and then back to its start.
var edgeInstants = []int64{0, 1, base, 1 << 62, math.MaxInt64 - 1, math.MaxInt64, -1, math.MinInt64 + 1, math.MinInt64, base}

// Edges drives every extreme limit alg accepts through extreme instants
// and costs and checks every outcome, then checks that a key is fully
// available again after two centuries idle and at the last instant of
// time.
func Edges(t *testing.T, alg ratelimit.Algorithm) {
	for _, l := range EdgeLimits {
		if !Accepts(alg, l) {
			continue
		}
		t.Run(l.String(), func(t *testing.T) {
			costs := []int64{1, l.Burst, 0, l.Burst + 1, ratelimit.MaxCost, 1}
			var state []byte
			for i, now := range edgeInstants {
				for _, cost := range costs {
					what := fmt.Sprintf("cost %d at %d (instant %d) under %s", cost, now, i, l)
					o, out, err := safeDecide(t, alg, state, now, l, cost)
					if err != nil {
						t.Fatalf("%s on state %x: %v", what, state, err)
					}
					CheckOutcome(t, what, state, l, cost, o, out)
					state = out
				}
			}
			// Exhaust at base, then idle for two centuries.
			o, out, err := safeDecide(t, alg, nil, base, l, l.Burst)
			if err != nil || !o.Allowed {
				t.Fatalf("taking the whole burst %d of a new key at %d: %+v, %v", l.Burst, base, o, err)
			}
			state = out
			for _, at := range []int64{base + 2*int64(ratelimit.MaxWindowSpan), math.MaxInt64} {
				p, _, err := safeDecide(t, alg, state, at, l, 0)
				if err != nil || p.Remaining != l.Burst || !p.Allowed {
					t.Errorf("peek at %d after taking the whole burst at %d: %+v, %v; want the whole burst %d available", at, base, p, err, l.Burst)
				}
			}
		})
	}
}

// safeDecide calls Decide, turning a panic into a failure.
func safeDecide(t *testing.T, alg ratelimit.Algorithm, state []byte, now int64, l ratelimit.Limit, cost int64) (o ratelimit.Outcome, out []byte, err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("Decide(cost %d at %d under %s) on state %x panicked: %v", cost, now, l, state, p)
		}
	}()
	o, out, err = alg.Decide(bytes.Clone(state), now, l, cost, nil)
	return o, bytes.Clone(out), err
}

// Allocs checks that Decide on an existing state does not allocate when
// dst has room, whether it allows, denies or peeks.
func Allocs(t *testing.T, alg ratelimit.Algorithm) {
	if testing.CoverMode() != "" {
		t.Skip("algotest: allocation counts are meaningless with coverage on")
	}
	l := ratelimit.Limit{Count: 10, Period: time.Second, Burst: 5}
	_, state, err := alg.Decide(nil, base, l, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	state = bytes.Clone(state)
	dst := make([]byte, 0, len(state)+256)
	for _, tc := range []struct {
		name string
		cost int64
	}{{"Allowed", 1}, {"Denied", 5}, {"Peek", 0}, {"OverBurst", 6}} {
		var err error
		allocs := testing.AllocsPerRun(100, func() {
			_, dst, err = alg.Decide(state, base, l, tc.cost, dst[:0])
		})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if allocs != 0 {
			t.Errorf("%s: Decide on an existing %d-byte state allocated %.1f times per call, want 0", tc.name, len(state), allocs)
		}
	}
}

// Concurrent calls Decide from several goroutines on one input state; run
// with -race it finds shared mutable state, and every call must give the
// same answer.
func Concurrent(t *testing.T, alg ratelimit.Algorithm) {
	l := ratelimit.Limit{Count: 10, Period: time.Second, Burst: 5}
	_, state, err := alg.Decide(nil, base, l, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, wantState, err := alg.Decide(state, base+1, l, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for range 8 {
		wg.Go(func() {
			dst := make([]byte, 0, 64)
			for range 200 {
				o, out, err := alg.Decide(state, base+1, l, 1, dst[:0])
				if err != nil || o != want || !bytes.Equal(out, wantState) {
					errs <- fmt.Sprintf("concurrent Decide gave %+v %x %v, want %+v %x", o, out, err, want, wantState)
					return
				}
				dst = out
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
