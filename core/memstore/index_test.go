package memstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// TestEntryIsOneCacheLine pins the entry to 64 bytes: a lookup reads one
// line per probed slot.
func TestEntryIsOneCacheLine(t *testing.T) {
	if n := unsafe.Sizeof(memEntry{}); n != 64 {
		t.Fatalf("memEntry is %d bytes, want 64", n)
	}
}

// TestShardLayout pins what every call writes to a shard's first cache
// line, and shards to whole lines from a line's start.
func TestShardLayout(t *testing.T) {
	var sh memShard
	if n := unsafe.Offsetof(sh.dir); n != 64 {
		t.Fatalf("memShard.dir at %d: mu, last and outcome are not one cache line", n)
	}
	if n := unsafe.Sizeof(sh); n%64 != 0 {
		t.Fatalf("memShard is %d bytes, not whole cache lines", n)
	}
	sp := testStore.space("layout", true)
	if at := uintptr(unsafe.Pointer(&sp.shards[0])) % 64; at != 0 {
		t.Fatalf("a namespace's shards start %d bytes into a cache line", at)
	}
}

// model is a shard's content as a plain map, for differential tests.
type model map[string]modelEntry

type modelEntry struct {
	h       uint64
	expires int64
	state   []byte
}

// tableKeys returns n keys, short and long (over inlineKey bytes), each
// with a random hash or, if collide, half of them with a hash drawn from
// few tags, so that tags collide, homes collide, and probes wrap around
// the table's end.
func tableKeys(r *rand.Rand, n int, collide bool) ([]string, map[string]uint64) {
	tags := []uint64{0, 1, 1 << 31, math.MaxUint32, math.MaxUint32 - 1, 0x9e3779b9}
	keys := make([]string, n)
	hash := make(map[string]uint64, n)
	for i := range keys {
		k := fmt.Sprint("k", i)
		if r.IntN(3) == 0 {
			k += strings.Repeat("-long", 1+r.IntN(8))
		}
		keys[i] = k
		if collide && r.IntN(2) == 0 {
			hash[k] = tags[r.IntN(len(tags))] << 32
		} else {
			hash[k] = r.Uint64()
		}
	}
	return keys, hash
}

// checkShard fails t unless sh holds exactly want and keeps the Robin Hood
// order, its count, and its long key and big state books.
func checkShard(t testing.TB, sh *memShard, want model, keys []string) {
	t.Helper()
	if sh.count != len(want) {
		t.Fatalf("count %d, want %d", sh.count, len(want))
	}
	for _, k := range keys {
		w, live := want[k]
		i, e := sh.find(k, keyAt(k, hashOf(want, k)))
		if ok := e != nil; ok != live {
			t.Fatalf("%q found %v, want %v", k, ok, live)
		}
		if !live {
			continue
		}
		got := sh.loadEntry(e, math.MinInt64, nil)
		if e != &sh.table(w.h).slots[i] || e.expires != w.expires || !bytes.Equal(got, w.state) {
			t.Fatalf("%q: expires %d state %x, want %d %x", k, e.expires, got, w.expires, w.state)
		}
	}
	held, longs, bigs := 0, 0, 0
	for j, r := range sh.dir {
		if r.t != sh.dir[j&(1<<r.t.depth-1)].t {
			t.Fatalf("directory slot %d holds another table than slot %d", j, j&(1<<r.t.depth-1))
		}
		if j >= 1<<r.t.depth {
			continue // counted at its first slot
		}
		n, count := len(r.slots), 0
		for i := range r.slots {
			e := &r.slots[i]
			if e.klen == 0 {
				continue
			}
			count++
			if e.tag&(1<<r.t.depth-1) != uint32(j) {
				t.Fatalf("tag %x in the table of directory slot %d, depth %d", e.tag, j, r.t.depth)
			}
			if e.klen == longKey {
				longs++
			}
			if e.n == bigState {
				bigs++
			}
			prev := &r.slots[(i+n-1)%n]
			if d := dist(e, i, n); d > 0 && (prev.klen == 0 || dist(prev, (i+n-1)%n, n) < d-1) {
				t.Fatalf("slot %d: distance %d after a slot at distance %d (empty %v)", i, d, dist(prev, (i+n-1)%n, n), prev.klen == 0)
			}
		}
		if count != r.t.count || count > r.t.limit {
			t.Fatalf("table %d holds %d entries, count %d, limit %d", j, count, r.t.count, r.t.limit)
		}
		held += count
	}
	if held != sh.count || longs != len(sh.longs)-len(sh.longFree) || bigs != len(sh.bigs)-len(sh.bigFree) {
		t.Fatalf("%d entries (count %d), %d long keys (%d-%d), %d big states (%d-%d)",
			held, sh.count, longs, len(sh.longs), len(sh.longFree), bigs, len(sh.bigs), len(sh.bigFree))
	}
}

// hashes is the hash of every key of a differential test, including keys
// not in the model.
var hashes map[string]uint64

func hashOf(_ model, k string) uint64 { return hashes[k] }

// keyAt returns the keyHash of key with the hash replaced by h.
func keyAt(key string, h uint64) keyHash {
	k := testStore.hash(key)
	k.h = h
	return k
}

var testStore, _ = New()

// runTable applies ops random operations on nkeys keys, with TTLs of up
// to maxTTL, to a new shard and to a model, checks them against each
// other every checkEvery operations and after the last, and returns the
// shard. Only small runs force collisions: a run of thousands of equal
// tags makes every probe through it long.
func runTable(t testing.TB, r *rand.Rand, ops, nkeys, maxTTL, checkEvery int) *memShard {
	keys, hash := tableKeys(r, nkeys, nkeys < 1000)
	hashes = hash
	sh := newShard()
	want := model{}
	now := int64(1000)
	for op := range ops {
		k := keys[r.IntN(len(keys))]
		h := hash[k]
		switch op := r.IntN(10); {
		case op < 6: // store a state, inline or big, or drop it with a zero TTL
			state := make([]byte, 1+r.IntN(inlineState+10))
			for i := range state {
				state[i] = byte(r.Uint32())
			}
			ttl := int64(1 + r.IntN(maxTTL))
			if r.IntN(20) == 0 {
				ttl = 0
			}
			// No reclaiming here: the sweep has its own operation.
			sh.store(k, keyAt(k, h), now, math.MinInt64, durationOf(ttl), state)
			if ttl == 0 {
				delete(want, k)
			} else {
				want[k] = modelEntry{h: h, expires: now + ttl, state: state}
			}
		case op < 8: // reset
			if i, e := sh.find(k, keyAt(k, h)); e != nil {
				sh.remove(h, i)
			}
			delete(want, k)
		case op < 9: // sweep what expired before now
			now += int64(r.IntN(30))
			sh.sweep(h, now)
			for k, w := range want {
				if _, e := sh.find(k, keyAt(k, w.h)); e == nil {
					if w.expires > now {
						t.Fatalf("sweep at %d dropped %q, which expires at %d", now, k, w.expires)
					}
					delete(want, k)
				}
			}
		default:
			now++
		}
		if op%checkEvery == 0 || op == ops-1 {
			checkShard(t, sh, want, keys)
		}
	}
	return sh
}

// TestTableMatchesMap drives a shard with random stores, resets and sweeps
// over colliding, wrapping, long and big-state keys, against a plain map.
func TestTableMatchesMap(t *testing.T) {
	for seed := range uint64(8) {
		r := rand.New(rand.NewPCG(seed, 18))
		runTable(t, r, 3000, 24+r.IntN(200), 100, 1)
	}
}

// TestTableSplitsMatchMap is TestTableMatchesMap with enough keys that
// tables split and the directory doubles.
func TestTableSplitsMatchMap(t *testing.T) {
	// TTLs long enough that thousands of keys stay live at once.
	sh := runTable(t, rand.New(rand.NewPCG(7, 18)), 50_000, 10_000, 1_000_000, 25_000)
	if len(sh.dir) == 1 {
		t.Fatal("no table split")
	}
}

// TestTableSplits: a shard of many keys holds them in tables of at most
// maxSlots slots, each found where the directory says.
func TestTableSplits(t *testing.T) {
	sh := newShard()
	r := rand.New(rand.NewPCG(5, 6))
	want := model{}
	keys := make([]string, 50_000)
	hashes = map[string]uint64{}
	for i := range keys {
		keys[i] = fmt.Sprint("key", i)
		hashes[keys[i]] = r.Uint64()
		sh.store(keys[i], keyAt(keys[i], hashes[keys[i]]), 0, math.MinInt64, 1<<40, []byte{byte(i)})
		want[keys[i]] = modelEntry{h: hashes[keys[i]], expires: 1 << 40, state: []byte{byte(i)}}
	}
	checkShard(t, sh, want, keys)
	if len(sh.dir) < 16 {
		t.Fatalf("%d directory slots for %d keys, want tables split", len(sh.dir), len(keys))
	}
	for _, r := range sh.dir {
		if len(r.slots) > maxSlots {
			t.Fatalf("a table of %d slots, over %d", len(r.slots), maxSlots)
		}
	}
}

// FuzzTable is TestTableMatchesMap from fuzzed seeds.
func FuzzTable(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Fuzz(func(t *testing.T, a, b uint64) {
		r := rand.New(rand.NewPCG(a, b))
		runTable(t, r, 500, 24+r.IntN(200), 100, 1)
	})
}

// TestIndexCollisions forces keys, short and long, onto one hash: each is
// found in its own slot, removing any of them keeps the others, and
// sweeping reclaims them all.
func TestIndexCollisions(t *testing.T) {
	sh := newShard()
	const h = 42 << 32
	keys := []string{"a", "b", strings.Repeat("long", 10), strings.Repeat("long", 11), "0123456789abcdef", "0123456789abcdeg"}
	want := model{}
	hashes = map[string]uint64{}
	for _, k := range append(keys, "c") {
		hashes[k] = h
	}
	for i, k := range keys {
		if _, e := sh.find(k, keyAt(k, h)); e != nil {
			t.Fatalf("%q found before insert", k)
		}
		state := []byte{byte(i)}
		sh.store(k, keyAt(k, h), 0, math.MinInt64, 1<<40, state)
		want[k] = modelEntry{h: h, expires: 1 << 40, state: state}
	}
	checkShard(t, sh, want, append(keys, "c"))
	for _, k := range []string{"a", keys[2], "0123456789abcdef"} {
		i, _ := sh.find(k, keyAt(k, h))
		sh.remove(h, i)
		delete(want, k)
		checkShard(t, sh, want, append(keys, "c"))
	}
	sh.store("c", keyAt("c", h), 0, math.MinInt64, 1<<40, []byte{9})
	want["c"] = modelEntry{h: h, expires: 1 << 40, state: []byte{9}}
	checkShard(t, sh, want, append(keys, "c"))
	for range len(sh.table(h).slots) {
		sh.sweep(h, 1<<40) // everything has expired by then
	}
	checkShard(t, sh, model{}, append(keys, "c"))
	if len(sh.longFree) != len(sh.longs) {
		t.Fatalf("after sweeping: %d of %d long keys free", len(sh.longFree), len(sh.longs))
	}
}

// TestSweepCoversTable: entries that expired before the cutoff are gone
// after len(slots)/sweepPerInsert inserts, whether a growth or the sweep
// drops them.
func TestSweepCoversTable(t *testing.T) {
	for _, old := range []int{3000, 2000} {
		sh := newShard()
		r := rand.New(rand.NewPCG(3, uint64(old)))
		for i := range old {
			sh.store(fmt.Sprint("old", i), keyAt(fmt.Sprint("old", i), r.Uint64()&^(0xffff<<32)), 0, math.MinInt64, 10, []byte{1})
		}
		live, grown := 0, false
		// One table: the hashes share their low tag bits.
		for n := len(sh.dir[0].slots); live <= n/sweepPerInsert; live++ {
			sh.store(fmt.Sprint("new", live), keyAt(fmt.Sprint("new", live), r.Uint64()&^(0xffff<<32)), 100, 50, 1<<40, []byte{1})
			grown = grown || len(sh.dir[0].slots) != n
		}
		if sh.count != live {
			t.Fatalf("%d old keys: %d entries after a full sweep, want the %d live ones (grown %v)", old, sh.count, live, grown)
		}
	}
}

func durationOf(ns int64) time.Duration { return time.Duration(ns) }

func newShard() *memShard {
	sh := &memShard{}
	sh.init()
	return sh
}

// TestKeyWords checks the words Store.hash returns against the key's
// bytes copied into 16 zeroed bytes, for every length up to inlineKey.
func TestKeyWords(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for n := range inlineKey + 1 {
		for range 100 {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(r.Uint32())
			}
			var pad [16]byte
			copy(pad[:], b)
			k := testStore.hash(string(b))
			lo, hi := k.lo, k.hi
			if wantLo, wantHi := binary.LittleEndian.Uint64(pad[:8]), binary.LittleEndian.Uint64(pad[8:]); lo != wantLo || hi != wantHi {
				t.Fatalf("words of %x = %#x %#x, want %#x %#x", b, lo, hi, wantLo, wantHi)
			}
		}
	}
}
