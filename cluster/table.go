package cluster

// A shard keeps its records in an open-addressing table with linear
// probing: a key's slot is the first, from its home (the hash bits above
// those that pick the shard), that holds it; an empty slot ends the
// search. Slots hold the hash beside the record, so a lookup reads one
// slot, not a map's control word and slot, before the record it wants.

// slot is one place of a shard's table.
type slot struct {
	hash uint64
	rec  *record // nil: empty; tombstone: removed
}

// tombstone fills the slot of a removed record: a search goes on past it,
// and an insert may take it.
var tombstone = new(record)

// minSlots is the size of a shard's first table.
const minSlots = 16

// home returns the first slot a key with hash h may take in a table of
// mask+1 slots.
func home(h, mask uint64) uint64 { return (h >> shardBits) & mask }

// get returns the record of ns/key, whose hash is h, or nil. The caller
// holds sh.mu.
func (sh *shard) get(h uint64, ns, key string) *record {
	if len(sh.slots) == 0 {
		return nil
	}
	mask := uint64(len(sh.slots) - 1)
	for i := home(h, mask); ; i = (i + 1) & mask {
		s := &sh.slots[i]
		switch {
		case s.rec == nil:
			return nil
		case s.hash == h && s.rec != tombstone && s.rec.id.key == key && s.rec.id.ns == ns:
			return s.rec
		}
	}
}

// put adds rec, which must not be in the shard yet. The caller holds
// sh.mu.
func (sh *shard) put(rec *record) {
	if (sh.used+1)*4 > len(sh.slots)*3 {
		sh.rehash()
	}
	mask := uint64(len(sh.slots) - 1)
	for i := home(rec.hash, mask); ; i = (i + 1) & mask {
		s := &sh.slots[i]
		if s.rec == nil || s.rec == tombstone {
			if s.rec == nil {
				sh.used++
			}
			*s = slot{hash: rec.hash, rec: rec}
			sh.count++
			return
		}
	}
}

// rehash moves the records to a table of at least twice as many slots as
// they need, leaving the tombstones behind.
func (sh *shard) rehash() {
	size := minSlots
	for size < 2*(sh.count+1) {
		size *= 2
	}
	old := sh.slots
	sh.slots, sh.used = make([]slot, size), sh.count
	mask := uint64(size - 1)
	for _, s := range old {
		if s.rec == nil || s.rec == tombstone {
			continue
		}
		i := home(s.hash, mask)
		for sh.slots[i].rec != nil {
			i = (i + 1) & mask
		}
		sh.slots[i] = s
	}
}

// remove takes rec out of the shard, if it is there. The caller holds
// sh.mu.
func (sh *shard) remove(rec *record) {
	if len(sh.slots) == 0 {
		return
	}
	mask := uint64(len(sh.slots) - 1)
	for i := home(rec.hash, mask); ; i = (i + 1) & mask {
		s := &sh.slots[i]
		switch s.rec {
		case nil:
			return
		case rec:
			sh.count--
			if sh.slots[(i+1)&mask].rec == nil {
				// No search passes this slot to reach a later one.
				*s = slot{}
				sh.used--
			} else {
				*s = slot{rec: tombstone}
			}
			return
		}
	}
}

// each calls f with every record of the shard; f may remove the record it
// is given, and must not add one. The caller holds sh.mu.
func (sh *shard) each(f func(*record)) {
	for i := range sh.slots {
		if r := sh.slots[i].rec; r != nil && r != tombstone {
			f(r)
		}
	}
}
