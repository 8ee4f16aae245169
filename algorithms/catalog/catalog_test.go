package catalog_test

import (
	"testing"

	"github.com/sluicehq/sluice/algorithms/catalog"
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
