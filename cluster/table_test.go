package cluster

import (
	"strconv"
	"testing"
)

// TestShardTable checks the shard's table against a map through inserts,
// removals and the rehashes they cause, with hashes chosen to collide:
// keys share their hash 4 by 4, and their homes overlap, at the start of
// the table and, wrapping around, at its end.
func TestShardTable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		hashOf func(i int) uint64
	}{
		{"start", func(i int) uint64 { return uint64(i/4*3) << shardBits }},
		{"end", func(i int) uint64 { return ^uint64(i/4*3) << shardBits }},
	} {
		t.Run(tc.name, func(t *testing.T) { testShardTable(t, tc.hashOf) })
	}
}

func testShardTable(t *testing.T, hashOf func(i int) uint64) {
	var sh shard
	want := map[string]*record{}
	check := func(step string) {
		t.Helper()
		for k, r := range want {
			if got := sh.get(r.hash, "ns", k); got != r {
				t.Fatalf("%s: get %s = %p, want %p", step, k, got, r)
			}
		}
		if got := sh.get(hashOf(1), "other", "k1"); got != nil {
			t.Fatalf("%s: get in another namespace = %p, want nil", step, got)
		}
		seen := map[*record]int{}
		sh.each(func(r *record) { seen[r]++ })
		if len(seen) != len(want) || sh.count != len(want) {
			t.Fatalf("%s: each saw %d records, count %d, want %d", step, len(seen), sh.count, len(want))
		}
		for r, n := range seen {
			if n != 1 || want[r.id.key] != r {
				t.Fatalf("%s: each gave %s %d times", step, r.id.key, n)
			}
		}
	}
	for round := range 3 {
		for i := range 300 {
			k := "k" + strconv.Itoa(i)
			if want[k] == nil {
				r := newRecord("ns", k, hashOf(i), 0)
				sh.put(r)
				want[k] = r
			}
		}
		check("insert round " + strconv.Itoa(round))
		// Remove 2 in 3, some inside an each, leaving tombstones that
		// the inserts of the next round reuse or rehash away.
		sh.each(func(r *record) {
			if i, _ := strconv.Atoi(r.id.key[1:]); i%3 == round {
				sh.remove(r)
				delete(want, r.id.key)
			}
		})
		for k, r := range want {
			if i, _ := strconv.Atoi(k[1:]); i%3 == (round+1)%3 {
				sh.remove(r)
				sh.remove(r) // removing twice changes nothing
				delete(want, k)
			}
		}
		check("remove round " + strconv.Itoa(round))
		if sh.used > len(sh.slots)*3/4 {
			t.Fatalf("round %d: %d of %d slots used", round, sh.used, len(sh.slots))
		}
	}
}
