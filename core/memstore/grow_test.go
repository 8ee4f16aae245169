package memstore

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// BenchmarkGrow reports the longest a growth holds a shard's lock: moving
// a table of maxSlots slots, which then splits, however many keys the
// shard holds.
func BenchmarkGrow(b *testing.B) {
	sh := newShard()
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; len(sh.dir) == 1; i++ {
		k := "user:" + strconv.Itoa(i)
		sh.store(k, keyAt(k, r.Uint64()), 0, math.MinInt64, 1<<40, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	}
	// Refill the shard until a table is one entry short of its limit.
	var full *tableRef
	for i := 0; full == nil; i++ {
		h := r.Uint64()
		k := "more:" + strconv.Itoa(i)
		sh.store(k, keyAt(k, h), 0, math.MinInt64, 1<<40, []byte{1, 2, 3, 4, 5, 6, 7, 8})
		if t := sh.table(h); len(t.slots) == maxSlots && t.t.count == t.t.limit {
			full = t
		}
	}
	slots, books, dir, depth, mask := full.slots, *full.t, sh.dir, sh.depth, sh.mask
	for b.Loop() {
		b.StopTimer()
		sh.dir, sh.depth, sh.mask = append([]tableRef(nil), dir...), depth, mask
		r := &tableRef{slots: append([]memEntry(nil), slots...), t: &table{}}
		*r.t = books
		b.StartTimer()
		sh.grow(r, math.MinInt64)
	}
}
