package tier

import (
	"hash/maphash"
	"sync"
)

// stateKey names the local state of one key of one rule.
type stateKey struct{ namespace, key string }

const tableShards = 64

// table is a map of local states split over lock shards, so callers on
// different keys rarely contend.
type table[V any] struct {
	seed   maphash.Seed
	shards [tableShards]struct {
		mu sync.Mutex
		m  map[stateKey]*V
		_  [40]byte // keep shards on separate cache lines
	}
}

func newTable[V any]() *table[V] {
	t := &table[V]{seed: maphash.MakeSeed()}
	for i := range t.shards {
		t.shards[i].m = make(map[stateKey]*V)
	}
	return t
}

func (t *table[V]) shard(k stateKey) int {
	return int(maphash.Comparable(t.seed, k) % tableShards)
}

// get returns the state of k, creating it with init when absent.
func (t *table[V]) get(k stateKey, init func() *V) *V {
	s := &t.shards[t.shard(k)]
	s.mu.Lock()
	v, ok := s.m[k]
	if !ok {
		v = init()
		s.m[k] = v
	}
	s.mu.Unlock()
	return v
}

// remove deletes k.
func (t *table[V]) remove(k stateKey) {
	s := &t.shards[t.shard(k)]
	s.mu.Lock()
	delete(s.m, k)
	s.mu.Unlock()
}

// each calls fn for every state; fn returns false to delete it. fn runs
// under the shard's lock and must not call back into the table.
func (t *table[V]) each(fn func(k stateKey, v *V) (keep bool)) {
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for k, v := range s.m {
			if !fn(k, v) {
				delete(s.m, k)
			}
		}
		s.mu.Unlock()
	}
}
