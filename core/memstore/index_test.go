package memstore

import (
	"strings"
	"testing"
)

// TestIndexCollisions drives a shard's index with keys forced onto one
// hash, short and long: each is found in its own slot, releasing any of
// them keeps the others, a key inserted after the first holder left
// takes its place, and sweeping reclaims colliding keys too.
func TestIndexCollisions(t *testing.T) {
	m, err := New()
	if err != nil {
		t.Fatal(err)
	}
	sp := m.space("t", true)
	sh := &sp.shards[0]
	const h = 42
	keys := []string{"a", "b", strings.Repeat("long", 10), strings.Repeat("long", 11), "0123456789abcdef", "0123456789abcdeg"}
	slots := map[string]uint32{}
	for _, k := range keys {
		if _, ok := sh.find(k, h); ok {
			t.Fatalf("%q found before insert", k)
		}
		slots[k] = sh.insert(k, h)
		sh.entry(slots[k]).expires = 1 << 62
	}
	check := func(live []string) {
		t.Helper()
		for _, k := range live {
			if i, ok := sh.find(k, h); !ok || i != slots[k] {
				t.Fatalf("%q: slot %d %v, want %d", k, i, ok, slots[k])
			}
		}
		if n := len(sh.index) + len(sh.collide); n != len(live) {
			t.Fatalf("%d keys indexed, want %d", n, len(live))
		}
	}
	check(keys)
	sh.release("a", h, slots["a"]) // the index's holder of h
	if _, ok := sh.find("a", h); ok {
		t.Fatal("a found after release")
	}
	check(keys[1:])
	slots["c"] = sh.insert("c", h)
	sh.entry(slots["c"]).expires = 1 << 62
	if sh.index[h] != slots["c"] {
		t.Fatal("a key inserted after the holder left did not take the index")
	}
	sh.release(keys[2], h, slots[keys[2]]) // a colliding long key
	check(append([]string{"c", "b"}, keys[3:]...))
	if len(sh.long) != 1 {
		t.Fatalf("%d long keys kept, want 1", len(sh.long))
	}
	for range 4 {
		sh.sweep(1 << 62) // everything has expired by then
	}
	check(nil)
	if len(sh.long) != 0 || len(sh.freed) != int(sh.next) {
		t.Fatalf("after sweeping: %d long keys, %d of %d slots free", len(sh.long), len(sh.freed), sh.next)
	}
}
