package catalog_test

import (
	"slices"
	"testing"

	"github.com/sluicehq/sluice/algorithms/catalog"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/algtest"
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

// TestDecideConcurrentSafe calls Decide of every algorithm from several
// goroutines on one state (run it with -race): identical results show
// Decide neither mutates its input nor shares anything between calls.
func TestDecideConcurrentSafe(t *testing.T) {
	for _, alg := range catalog.All() {
		t.Run(alg.Name(), func(t *testing.T) { algtest.Concurrent(t, alg) })
	}
}
