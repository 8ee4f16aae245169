package ratelimit

import (
	"cmp"
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// inlineState is how many bytes of state an entry holds without a separate
// allocation. Every in-repo algorithm except the sliding log fits.
const inlineState = 31

// bigState marks an entry whose state lives in its shard's big map.
const bigState = 0xff

// memShards is the number of lock shards per namespace.
const memShards = 64

// pageBits sets the slab page size: entries are allocated 128 at a time.
const pageBits = 7

const pageSize = 1 << pageBits

// sweepPerInsert is how many entries an insert examines for expiry, which
// keeps memory bounded by the number of live keys without a goroutine.
const sweepPerInsert = 4

// MemoryStore is the embedded in-memory Store, the default of New. It keeps
// state in sharded maps guarded by mutexes, decides with zero allocations
// for an existing key whose state fits inline (31 bytes), and reclaims idle
// keys: each insert examines a few entries and drops those whose TTL
// passed more than a grace period ago (one minute by default, see
// WithMemoryReclaimGrace). Dropping expired state changes nothing by the
// Algorithm contract; the grace only spares hot keys with tiny TTLs a
// delete and a re-insert. Memory is therefore bounded by the keys used
// within their TTL plus the grace. It starts no goroutine.
//
// Memory: each key costs one index slot (a string header and a slot
// number, about 25 bytes at full load) plus a 40-byte slab entry, plus its
// key bytes; freed entries are reused by later keys.
//
// A MemoryStore is safe for concurrent use. Its state is lost when the
// process exits. Create one with NewMemoryStore.
type MemoryStore struct {
	clock  Clock
	grace  int64 // reclaim state expired at least this long ago, ns
	seed   maphash.Seed
	mu     sync.Mutex // serialises namespace creation
	spaces atomic.Pointer[map[string]*memSpace]
	closed atomic.Bool
}

type memSpace struct {
	shards [memShards]memShard
}

type memShard struct {
	mu    sync.Mutex
	index map[string]uint32 // key → slab slot
	pages []*[pageSize]memEntry
	free  []uint32 // released slots, reused first
	next  uint32   // slots handed out from pages so far
	big   map[uint32][]byte
	in    []byte // scratch: current state
	out   []byte // scratch: new state
	_     [64]byte
}

type memEntry struct {
	expires int64
	n       uint8
	state   [inlineState]byte
}

// MemoryOption configures a MemoryStore.
type MemoryOption interface {
	applyMemory(*MemoryStore) error
}

type memoryOptionFunc func(*MemoryStore) error

func (f memoryOptionFunc) applyMemory(m *MemoryStore) error { return f(m) }

// WithMemoryClock sets the store's clock; the default is SystemClock.
func WithMemoryClock(c Clock) MemoryOption {
	return memoryOptionFunc(func(m *MemoryStore) error {
		if c == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalidOption)
		}
		m.clock = c
		return nil
	})
}

// DefaultReclaimGrace is how long a MemoryStore keeps a key whose state
// has expired before an insert may reclaim it.
const DefaultReclaimGrace = time.Minute

// WithMemoryReclaimGrace sets how long a key whose state has expired is
// kept before an insert may reclaim its memory; 0 reclaims as soon as the
// state expires. Decisions never see expired state either way: the grace
// only trades memory for fewer deletes and re-inserts of hot keys. It must
// not be negative.
func WithMemoryReclaimGrace(d time.Duration) MemoryOption {
	return memoryOptionFunc(func(m *MemoryStore) error {
		if d < 0 {
			return fmt.Errorf("%w: negative reclaim grace %s", ErrInvalidOption, d)
		}
		m.grace = int64(d)
		return nil
	})
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore(opts ...MemoryOption) (*MemoryStore, error) {
	m := &MemoryStore{clock: SystemClock{}, seed: maphash.MakeSeed(), grace: int64(DefaultReclaimGrace)}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		if err := o.applyMemory(m); err != nil {
			return nil, err
		}
	}
	empty := map[string]*memSpace{}
	m.spaces.Store(&empty)
	return m, nil
}

func (m *MemoryStore) space(ns string, create bool) *memSpace {
	if sp := (*m.spaces.Load())[ns]; sp != nil || !create {
		return sp
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := *m.spaces.Load()
	if sp := cur[ns]; sp != nil {
		return sp
	}
	sp := &memSpace{}
	for i := range sp.shards {
		sp.shards[i].index = make(map[string]uint32)
		sp.shards[i].in = make([]byte, 0, 64)
		sp.shards[i].out = make([]byte, 0, 64)
	}
	next := make(map[string]*memSpace, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	next[strings.Clone(ns)] = sp
	m.spaces.Store(&next)
	return sp
}

func (m *MemoryStore) shard(sp *memSpace, key string) *memShard {
	return &sp.shards[maphash.String(m.seed, key)&(memShards-1)]
}

func (m *MemoryStore) begin(ctx context.Context) error {
	if m.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ratelimit: memory store: %w", err)
	}
	return nil
}

// Apply applies c atomically. See Store.
func (m *MemoryStore) Apply(ctx context.Context, c Check) (Outcome, error) {
	if err := m.begin(ctx); err != nil {
		return Outcome{}, err
	}
	if err := c.Validate(); err != nil {
		return Outcome{}, err
	}
	var o Outcome
	if err := m.apply(m.space(c.Namespace, true), &c, &o); err != nil {
		return Outcome{}, err
	}
	return o, nil
}

// apply is Apply for a validated check c whose namespace is sp, writing
// the outcome to *res only on success. The Limiter calls it directly, with
// sp looked up once, so that the hot path neither copies the check or the
// outcome nor looks the namespace up again.
func (m *MemoryStore) apply(sp *memSpace, c *Check, res *Outcome) error {
	sh := m.shard(sp, c.Key)
	sh.mu.Lock()
	now := m.clock.Now()
	slot, found := sh.index[c.Key]
	sh.in = sh.loadSlot(slot, found, now, sh.in[:0])
	var (
		o   Outcome
		out []byte
		err error
	)
	if c.Op == OpTake { // the hot path, without Evaluate's dispatch
		o, out, err = c.Algorithm.Decide(sh.in, now, c.Limit, c.Cost, sh.out[:0])
	} else {
		o, out, err = Evaluate(c.Algorithm, c.Op, sh.in, now, c.Limit, c.Cost, c.MaxWait, sh.out[:0])
	}
	sh.out = out[:0]
	if err == nil && o.Changed {
		sh.storeSlot(c.Key, slot, found, now, m.cutoff(now), o.TTL, out)
	}
	sh.mu.Unlock()
	if err != nil {
		return fmt.Errorf("key %s: %w", printableKey(c.Key), err)
	}
	*res = o
	return nil
}

func (sh *memShard) entry(i uint32) *memEntry {
	return &sh.pages[i>>pageBits][i&(pageSize-1)]
}

// load appends the live state of key to dst.
func (sh *memShard) load(key string, now int64, dst []byte) []byte {
	i, ok := sh.index[key]
	return sh.loadSlot(i, ok, now, dst)
}

// loadSlot appends the live state in slot i, if found, to dst.
func (sh *memShard) loadSlot(i uint32, found bool, now int64, dst []byte) []byte {
	if !found {
		return dst
	}
	e := sh.entry(i)
	if e.expires <= now {
		return dst
	}
	if e.n == bigState {
		return append(dst, sh.big[i]...)
	}
	return append(dst, e.state[:e.n]...)
}

// cutoff returns the instant before which expired entries may be
// reclaimed: now minus the grace, saturating at the smallest int64.
func (m *MemoryStore) cutoff(now int64) int64 {
	if now < -(1<<63-1)+m.grace {
		return -(1 << 63)
	}
	return now - m.grace
}

// store records the new state of key, or drops it when its TTL is over.
// Inserts reclaim entries that expired before cutoff.
func (sh *memShard) store(key string, now, cutoff int64, o Outcome, state []byte) {
	i, exists := sh.index[key]
	sh.storeSlot(key, i, exists, now, cutoff, o.TTL, state)
}

// storeSlot is store for a key already looked up: slot i if exists.
func (sh *memShard) storeSlot(key string, i uint32, exists bool, now, cutoff int64, ttl time.Duration, state []byte) {
	if ttl <= 0 || len(state) == 0 {
		if exists {
			sh.release(key, i)
		}
		return
	}
	if !exists {
		sh.sweep(cutoff)
		i = sh.alloc()
		sh.index[strings.Clone(key)] = i
	}
	e := sh.entry(i)
	e.expires = saturatingAdd(now, int64(ttl))
	if len(state) <= inlineState {
		if e.n == bigState {
			delete(sh.big, i)
		}
		e.n = uint8(len(state))
		copy(e.state[:], state)
		return
	}
	e.n = bigState
	if sh.big == nil {
		sh.big = make(map[uint32][]byte)
	}
	sh.big[i] = append(sh.big[i][:0], state...)
}

// alloc returns a free slab slot.
func (sh *memShard) alloc() uint32 {
	if n := len(sh.free); n > 0 {
		i := sh.free[n-1]
		sh.free = sh.free[:n-1]
		return i
	}
	i := sh.next
	if int(i>>pageBits) == len(sh.pages) {
		sh.pages = append(sh.pages, new([pageSize]memEntry))
	}
	sh.next++
	return i
}

// release drops key and frees its slot.
func (sh *memShard) release(key string, i uint32) {
	delete(sh.index, key)
	e := sh.entry(i)
	if e.n == bigState {
		delete(sh.big, i)
	}
	*e = memEntry{}
	sh.free = append(sh.free, i)
}

// sweep drops a few entries that expired before cutoff; called on insert.
func (sh *memShard) sweep(cutoff int64) {
	n := 0
	for k, i := range sh.index {
		if sh.entry(i).expires <= cutoff {
			sh.release(k, i)
		}
		n++
		if n >= sweepPerInsert {
			return
		}
	}
}

func saturatingAdd(a, b int64) int64 {
	if b > 0 && a > (1<<63-1)-b {
		return 1<<63 - 1
	}
	return a + b
}

// ApplyAll applies checks atomically, all or nothing. See Store.
func (m *MemoryStore) ApplyAll(ctx context.Context, checks []Check, out []Outcome) (bool, error) {
	if err := m.begin(ctx); err != nil {
		return false, err
	}
	if len(out) < len(checks) {
		return false, fmt.Errorf("%w: %d outcomes for %d checks", ErrInvalidOption, len(out), len(checks))
	}
	shards := make([]*memShard, len(checks))
	for i := range checks {
		if err := checks[i].Validate(); err != nil {
			return false, fmt.Errorf("check %d: %w", i, err)
		}
		shards[i] = m.shard(m.space(checks[i].Namespace, true), checks[i].Key)
	}
	locks := slices.Clone(shards)
	slices.SortFunc(locks, func(a, b *memShard) int {
		return cmp.Compare(uintptr(unsafe.Pointer(a)), uintptr(unsafe.Pointer(b)))
	})
	locks = slices.Compact(locks)
	for _, sh := range locks {
		sh.mu.Lock()
	}
	defer func() {
		for _, sh := range locks {
			sh.mu.Unlock()
		}
	}()
	now := m.clock.Now()
	type pending struct {
		ns, key string
		state   []byte
		written bool
	}
	states := make([]pending, 0, len(checks))
	find := func(ns, key string) int {
		for i := range states {
			if states[i].ns == ns && states[i].key == key {
				return i
			}
		}
		return -1
	}
	allowed := true
	for i, c := range checks {
		j := find(c.Namespace, c.Key)
		var cur []byte
		if j >= 0 {
			cur = states[j].state
		} else {
			cur = shards[i].load(c.Key, now, nil)
		}
		o, next, err := Evaluate(c.Algorithm, c.Op, cur, now, c.Limit, c.Cost, c.MaxWait, nil)
		if err != nil {
			return false, fmt.Errorf("check %d, key %s: %w", i, printableKey(c.Key), err)
		}
		out[i] = o
		if (c.Op == OpTake || c.Op == OpReserve) && !o.Allowed {
			allowed = false
		}
		if !o.Changed {
			next = cur
		}
		if j >= 0 {
			states[j].state = next
		} else {
			states = append(states, pending{ns: c.Namespace, key: c.Key, state: next})
		}
	}
	if !allowed {
		return false, nil
	}
	// Commit the final state of every distinct key with the TTL of the
	// last check that touched it.
	for i := len(checks) - 1; i >= 0; i-- {
		c := checks[i]
		j := find(c.Namespace, c.Key)
		if states[j].written {
			continue
		}
		if out[i].Changed || !sameState(shards[i].load(c.Key, now, nil), states[j].state) {
			shards[i].store(c.Key, now, m.cutoff(now), out[i], states[j].state)
		}
		states[j].written = true
	}
	return true, nil
}

func sameState(a, b []byte) bool { return string(a) == string(b) }

// Reset deletes the state of key in namespace.
func (m *MemoryStore) Reset(ctx context.Context, namespace, key string) error {
	if err := m.begin(ctx); err != nil {
		return err
	}
	if !ValidKey(key) {
		return fmt.Errorf("%w: key length %d outside 1..%d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	sp := m.space(namespace, false)
	if sp == nil {
		return nil
	}
	sh := m.shard(sp, key)
	sh.mu.Lock()
	if i, ok := sh.index[key]; ok {
		sh.release(key, i)
	}
	sh.mu.Unlock()
	return nil
}

// Len returns the number of keys holding state, expired or not, in all
// namespaces. It is meant for tests and metrics.
func (m *MemoryStore) Len() int {
	n := 0
	for _, sp := range *m.spaces.Load() {
		for i := range sp.shards {
			sh := &sp.shards[i]
			sh.mu.Lock()
			n += len(sh.index)
			sh.mu.Unlock()
		}
	}
	return n
}

// Close drops all state. Closing twice is not an error; other calls after
// Close return ErrClosed.
func (m *MemoryStore) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	m.mu.Lock()
	empty := map[string]*memSpace{}
	m.spaces.Store(&empty)
	m.mu.Unlock()
	return nil
}

var _ Store = (*MemoryStore)(nil)
