package catalog_test

import (
	"bytes"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms/catalog"
	"github.com/sluicehq/sluice/core/ratelimit"
)

func TestAllNamesUniqueAndFound(t *testing.T) {
	seen := map[string]bool{}
	for _, a := range catalog.All() {
		name := a.Name()
		if name == "" || seen[name] {
			t.Fatalf("empty or duplicate name %q", name)
		}
		seen[name] = true
		got, ok := catalog.ByName(name)
		if !ok || got.Name() != name {
			t.Fatalf("ByName(%q) = %v, %v", name, got, ok)
		}
	}
	if _, ok := catalog.ByName("no-such-algorithm"); ok {
		t.Fatal("ByName found an unknown name")
	}
}

// TestCapabilities pins which optional capabilities each algorithm has.
func TestCapabilities(t *testing.T) {
	want := map[string][3]bool{ // Reserver, Refunder, Charger
		"tokenbucket":   {true, true, true},
		"gcra":          {true, true, true},
		"leakybucket":   {true, true, true},
		"fixedwindow":   {false, false, true},
		"slidingwindow": {false, false, true},
		"slidinglog":    {false, false, false},
	}
	var names []string
	for _, a := range catalog.All() {
		names = append(names, a.Name())
		_, res := a.(ratelimit.Reserver)
		_, ref := a.(ratelimit.Refunder)
		_, chg := a.(ratelimit.Charger)
		if got := [3]bool{res, ref, chg}; got != want[a.Name()] {
			t.Errorf("%s: Reserver, Refunder, Charger = %v, want %v", a.Name(), got, want[a.Name()])
		}
	}
	slices.Sort(names)
	if len(names) != len(want) {
		t.Fatalf("All() = %v, want the %d algorithms %v", names, len(want), want)
	}
}

// TestDecideConcurrentSafe runs every algorithm from several goroutines on
// one shared input state, each with its own dst: the race detector and the
// identical results show Decide neither mutates its input nor shares
// anything between calls.
func TestDecideConcurrentSafe(t *testing.T) {
	l := ratelimit.Limit{Count: 5, Period: time.Second, Burst: 7}
	const now = int64(1_700_000_000_000_000_000)
	for _, alg := range catalog.All() {
		_, state, err := alg.Decide(nil, now, l, 3, nil)
		if err != nil {
			t.Fatal(err)
		}
		want, wantState, err := alg.Decide(state, now+1e8, l, 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan string, 8)
		for range 8 {
			wg.Go(func() {
				dst := make([]byte, 0, 64)
				for range 200 {
					got, out, err := alg.Decide(state, now+1e8, l, 2, dst[:0])
					if err != nil || got != want || !bytes.Equal(out, wantState) {
						errs <- alg.Name()
						return
					}
					dst = out
				}
			})
		}
		wg.Wait()
		close(errs)
		for name := range errs {
			t.Fatalf("%s: concurrent Decide differed from the sequential one", name)
		}
	}
}
