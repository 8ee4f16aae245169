package memstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/keyfmt"
	"github.com/sluicehq/sluice/internal/lockorder"
)

// inlineState is how many bytes of state an entry holds without a separate
// allocation. Every in-repo algorithm except the sliding log fits.
const inlineState = 31

// bigState marks an entry whose state lives in its shard's bigs, at the
// index held in the entry's first state bytes.
const bigState = 0xff

// inlineKey is how many bytes of key an entry holds, so that finding a
// key reads its entry and nothing else; a longer key lives in its shard's
// longs, at the index held in the entry's first key bytes (longKey).
const (
	inlineKey = 16
	longKey   = 0xff
)

// memShards is the number of lock shards per namespace: enough that the
// shards are one allocation over 32 KB, which Go aligns to a page, so that
// each starts on a cache line (see memShard).
const memShards = 128

// A table grows when it would hold more than maxLoadNum/maxLoadDen of its
// slots, by growNum/growDen. Each slot is a 64-byte entry, so the load
// sets the bytes per key: 64 ÷ load, 80 to 100 bytes between growths. A
// small growth step keeps the load, and so the bytes per key, in a narrow
// band; its price is moving each entry about four times over the table's
// life instead of once.
//
// A table of maxSlots slots splits in two instead of growing, so that a
// growth, which the call that inserts pays under the shard's lock, moves
// at most maxSlots entries (256 KB) however many keys the shard holds.
// After maxDepth splits (a shard of 2^16 tables) tables grow unbounded.
const (
	maxLoadNum, maxLoadDen = 4, 5
	growNum, growDen       = 5, 4
	minSlots               = 8
	maxSlots               = 4096
	maxDepth               = 16
)

// sweepPerInsert is how many slots an insert examines for expiry, which
// keeps memory bounded by the number of live keys without a goroutine.
const sweepPerInsert = 4

// Store is the embedded in-memory ratelimit.Store. Create one with New;
// the zero value is not usable. A Store is safe for concurrent use. Its
// state is lost when the process exits.
type Store struct {
	clock  ratelimit.Clock
	system bool  // clock is ratelimit.SystemClock: read it without the interface call
	grace  int64 // reclaim state expired at least this long ago, ns
	seed   maphash.Seed
	mix    [2]uint64  // random: the seed of the hash of short keys
	mu     sync.Mutex // serialises namespace creation
	spaces atomic.Pointer[map[string]*memSpace]
	closed atomic.Bool
}

type memSpace struct {
	shards [memShards]memShard
}

// memShard is one lock shard: a directory of open-addressed hash tables
// (extendible hashing) whose slots are the entries themselves, so that
// finding an existing key reads the shard's directory slot, which stays
// in cache, and one entry's cache line (and, on a long probe, the next
// ones). The low bits of a key's tag pick its directory slot; a table
// whose keys share depth low bits fills the 2^(len(dir)-depth) directory
// slots they name.
//
// Each table uses Robin Hood linear probing: an entry never sits farther
// from its home slot than an entry it passed, so a lookup stops at the
// first entry nearer its own home, and deleting shifts the following
// entries back instead of leaving a tombstone.
//
// A shard is five cache lines and starts on a line (see memShards). The
// first line holds what every call writes, mu, last and outcome, so that
// a hot key's calls on two cores pass that line and the entry's between
// them, not four.
type memShard struct {
	mu sync.Mutex
	// last is the latest instant decided under mu (see Take).
	last int64
	// outcome is the outcome of a Take, written under mu.
	outcome ratelimit.Outcome

	dir   []tableRef
	mask  uint32 // len(dir)-1
	depth uint8  // len(dir) is 1<<depth
	count int    // entries held in all tables
	// longs holds the keys over inlineKey bytes and bigs the states over
	// inlineState bytes, each entry naming its own by index; the free
	// lists hold released indexes, reused first.
	longs    []string
	longFree []uint32
	bigs     [][]byte
	bigFree  []uint32
	in       []byte // scratch: current state
	out      []byte // scratch: new state
	// scratch holds a new key's state before it has an entry.
	scratch [inlineState]byte
	_       [41]byte // to a whole number of cache lines
}

// tableRef is a directory slot: the table's slots, read by every lookup,
// and its books, read on insert and delete.
type tableRef struct {
	slots []memEntry
	t     *table
}

// table is the books of one table of a shard.
type table struct {
	count int // entries held
	limit int // count at which the table grows
	// sweepAt is the next slot an insert examines for expiry.
	sweepAt int
	depth   uint8 // low tag bits its keys share
}

// memEntry is one slot of a shard's table: 64 bytes, one cache line (a
// table of more than 32 KB is page-aligned, and smaller ones come from
// size classes that are multiples of 64 bytes). It holds no pointers, so
// the collector never scans a table.
type memEntry struct {
	expires int64
	// key is a short key's words (see Store.hash), or in key[0] a long
	// key's index in its shard's longs.
	key [2]uint64
	// tag is the high half of the key's hash: it places the entry (see
	// home) and rejects most other keys before their words are compared.
	tag   uint32
	n     uint8 // state length, or bigState
	klen  uint8 // key length, or longKey; 0 marks an empty slot
	state [inlineState]byte
	_     [3]byte
}

// home returns the slot a tag's entry would take in a table of n slots
// with no other entry in the way: the tag scaled to n, which needs no
// power-of-two size.
func home(tag uint32, n int) int { return int(uint64(tag) * uint64(n) >> 32) }

// dist returns how far slot i of a table of n slots lies past the home of
// its entry e.
func dist(e *memEntry, i, n int) int {
	d := i - home(e.tag, n)
	if d < 0 {
		d += n
	}
	return d
}

// ref reads the index of a big state that an entry stores in the first
// bytes of its state.
func ref(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

// load64 and load32 read 8 and 4 bytes of s from i, little-endian; the
// compiler makes each one load.
func load64(s string, i int) uint64 {
	b := s[i : i+8]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

func load32(s string, i int) uint32 {
	b := s[i : i+4]
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// keyHash is what a shard looks a key up by besides the key: its hash
// and, for a key of up to inlineKey bytes, its words (see Store.hash). It
// is three words, which the compiler keeps in registers.
type keyHash struct{ h, lo, hi uint64 }

// is reports whether e holds key, whose hash is k.
func (sh *memShard) is(e *memEntry, key string, k keyHash) bool {
	if len(key) <= inlineKey {
		return e.key[0] == k.lo && e.key[1] == k.hi && int(e.klen) == len(key)
	}
	return e.klen == longKey && sh.longs[e.key[0]] == key
}

// Option configures a Store.
type Option interface {
	apply(*Store) error
}

type optionFunc func(*Store) error

func (f optionFunc) apply(m *Store) error { return f(m) }

// WithClock sets the store's clock; the default is ratelimit.SystemClock.
func WithClock(c ratelimit.Clock) Option {
	return optionFunc(func(m *Store) error {
		if c == nil {
			return fmt.Errorf("%w: nil clock", ratelimit.ErrInvalidOption)
		}
		m.clock = c
		return nil
	})
}

// DefaultReclaimGrace is how long a Store keeps a key whose state
// has expired before an insert may reclaim it.
const DefaultReclaimGrace = time.Minute

// WithReclaimGrace sets how long a key whose state has expired is
// kept before an insert may reclaim its memory; 0 reclaims as soon as the
// state expires. Decisions never see expired state either way: the grace
// only trades memory for fewer deletes and re-inserts of hot keys. It must
// not be negative.
func WithReclaimGrace(d time.Duration) Option {
	return optionFunc(func(m *Store) error {
		if d < 0 {
			return fmt.Errorf("%w: negative reclaim grace %s", ratelimit.ErrInvalidOption, d)
		}
		m.grace = int64(d)
		return nil
	})
}

// New returns an empty Store.
func New(opts ...Option) (*Store, error) {
	m := &Store{clock: ratelimit.SystemClock{}, seed: maphash.MakeSeed(), mix: [2]uint64{rand.Uint64(), rand.Uint64()}, grace: int64(DefaultReclaimGrace)}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ratelimit.ErrInvalidOption)
		}
		if err := o.apply(m); err != nil {
			return nil, err
		}
	}
	_, m.system = m.clock.(ratelimit.SystemClock)
	empty := map[string]*memSpace{}
	m.spaces.Store(&empty)
	return m, nil
}

func (m *Store) space(ns string, create bool) *memSpace {
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
		sp.shards[i].init()
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

// now reads the store's clock.
func (m *Store) now() int64 {
	if m.system {
		return ratelimit.SystemClock{}.Now()
	}
	return m.clock.Now()
}

// shard returns key's shard in sp and its hash, the only hash of the key
// a call computes: its tag places the key in the shard (see memShard).
func (m *Store) shard(sp *memSpace, key string) (*memShard, keyHash) {
	k := m.hash(key)
	return &sp.shards[k.h&(memShards-1)], k
}

// hash returns the hash of key and, for a key of up to inlineKey bytes,
// its words: the two little-endian words of its bytes padded with zeros,
// which with its length are the key, as an entry holds it, so that a
// lookup compares two words. Each word is read with at most two loads,
// which may overlap.
//
// Such a key, the common case, is hashed by one 128-bit multiply of its
// words, each masked with a random word, folded to 64 bits: how Go's
// runtime hashes short keys where it has no AES (wyhash), in a tenth of
// maphash's instructions. Longer keys go through maphash.
func (m *Store) hash(key string) keyHash {
	var lo, hi uint64
	switch n := len(key); {
	case n > inlineKey:
		return keyHash{h: maphash.String(m.seed, key)}
	case n >= 8:
		lo, hi = load64(key, 0), load64(key, n-8)>>(8*(16-n))
	case n >= 4:
		lo = uint64(load32(key, 0)) | uint64(load32(key, n-4))<<(8*(n-4))
	case n > 0:
		lo = uint64(key[0]) | uint64(key[n/2])<<(8*(n/2)) | uint64(key[n-1])<<(8*(n-1))
	}
	p1, p0 := bits.Mul64(lo^m.mix[0], hi^m.mix[1])
	// The length tells apart keys that differ only by trailing zero bytes.
	return keyHash{h: p1 ^ p0 ^ uint64(len(key)), lo: lo, hi: hi}
}

// init gives sh its first, empty table.
func (sh *memShard) init() {
	sh.dir = []tableRef{{t: &table{}}}
}

// table returns the directory slot of hash h.
func (sh *memShard) table(h uint64) *tableRef { return &sh.dir[uint32(h>>32)&sh.mask] }

// find returns the entry of key, whose hash is k, and its slot in its
// table; e is nil when the table does not hold key.
func (sh *memShard) find(key string, k keyHash) (i int, e *memEntry) {
	slots := sh.table(k.h).slots
	n := len(slots)
	if n == 0 {
		return 0, nil
	}
	tag := uint32(k.h >> 32)
	i = home(tag, n)
	for d := 0; ; d++ {
		e := &slots[i]
		if e.klen == 0 {
			return 0, nil
		}
		if e.tag == tag && sh.is(e, key, k) {
			return i, e
		}
		if dist(e, i, n) < d {
			// key would have displaced e: it is not in the table.
			return 0, nil
		}
		if i++; i == n {
			i = 0
		}
	}
}

func (m *Store) begin(ctx context.Context) error {
	if m.closed.Load() {
		return ratelimit.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ratelimit: memory store: %w", err)
	}
	return nil
}

// Namespace is a handle on one namespace of a Store for a hot path: it
// looks the namespace up once, and applies a check by pointer, skipping
// the validation its caller did once for many checks (a sluice.Limiter
// validates its rule when it is made). Copying a check and an outcome
// by value on every call costs a hot key about a tenth of its time. A
// Namespace is safe for concurrent use.
type Namespace struct {
	m    *Store
	name string
	sp   atomic.Pointer[memSpace]
}

// Namespace returns the handle on namespace ns, which must be at most
// ratelimit.MaxKeyLen bytes.
func (m *Store) Namespace(ns string) *Namespace { return &Namespace{m: m, name: ns} }

// Apply is Store.Apply for *c, whose Namespace must be n's, writing the
// outcome to *o on success. Of c it checks only the per-call fields
// (Check.ValidateRequest): the caller has validated c's algorithm and
// limit, for example with Check.Validate on a first check.
func (n *Namespace) Apply(ctx context.Context, c *ratelimit.Check, o *ratelimit.Outcome) error {
	if err := n.m.begin(ctx); err != nil {
		return err
	}
	if err := c.ValidateRequest(); err != nil {
		return err
	}
	sp := n.sp.Load()
	if sp == nil {
		sp = n.m.space(n.name, true)
		n.sp.Store(sp)
	}
	return n.m.apply(sp, c, o)
}

// Prepared is an algorithm and a limit made ready for Namespace.Take:
// the limit's constants derived once, and the algorithm's decision made
// on the stored state in place. It is immutable and safe for concurrent
// use.
type Prepared struct {
	take  func(state []byte, now, cost int64, o *ratelimit.Outcome) (int, error)
	alg   ratelimit.Algorithm
	limit ratelimit.Limit
}

// inPlaceTaker is the optional Algorithm capability Prepare uses (gcra
// and tokenbucket have it): PrepareTake returns Decide under l as a function that derives
// l's constants once and updates a state in place, writing the new state
// to state[:n] only when the outcome has Changed, given a state capacity
// of at least maxState bytes. Its outcomes, states and errors must be
// exactly Decide's.
type inPlaceTaker interface {
	PrepareTake(l ratelimit.Limit) (take func(state []byte, now, cost int64, o *ratelimit.Outcome) (n int, err error), maxState int)
}

// Prepare returns alg under limit, both valid (see Check.Validate), ready
// for Namespace.Take; or nil when alg has no in-place take whose states
// fit the store's entries, and then callers use Apply.
func Prepare(alg ratelimit.Algorithm, limit ratelimit.Limit) *Prepared {
	ip, ok := alg.(inPlaceTaker)
	if !ok {
		return nil
	}
	take, maxState := ip.PrepareTake(limit)
	if take == nil || maxState > inlineState {
		return nil
	}
	return &Prepared{take: take, alg: alg, limit: limit}
}

// Take is Apply for an OpTake check of cost units on key under p's
// algorithm and limit, for package sluice: it writes the outcome's
// Allowed, Remaining, RetryAfter and ResetAfter to d, a caller's
// sluice.Decision converted, before it releases the shard's lock, so that
// the caller's later copies of the decision read stores already made; the
// other fields are the caller's. They are undefined on error. It checks
// the key and the cost, not p: see Prepare.
func (n *Namespace) Take(ctx context.Context, p *Prepared, key string, cost int64, d *decision.Fields) error {
	m := n.m
	if m.closed.Load() {
		return ratelimit.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ratelimit: memory store: %w", err)
	}
	if !ratelimit.ValidKey(key) || cost < 0 || cost > ratelimit.MaxCost {
		return invalid(key, cost)
	}
	sp := n.sp.Load()
	if sp == nil {
		sp = m.space(n.name, true)
		n.sp.Store(sp)
	}
	sh, k := m.shard(sp, key)
	// With the system clock, the clock is read before the lock, keeping
	// the critical section short for contended keys, and raised to the
	// latest instant decided under the lock: instants stay monotonic in
	// lock order and each lies between the call's start and its taking
	// the lock, so decisions stay linearizable. An injected clock, which
	// may go backwards, is read under the lock.
	var now int64
	if m.system {
		now = ratelimit.SystemClock{}.Now()
	}
	sh.mu.Lock()
	if m.system {
		now = max(now, sh.last)
	} else {
		now = m.clock.Now()
	}
	sh.last = now
	slot, e := sh.find(key, k)
	state := sh.scratch[:0]
	if e != nil {
		switch {
		case e.n == bigState:
			// Another algorithm's state, shared under this namespace: the
			// generic path reads it (and reports it corrupt).
			sh.mu.Unlock()
			return n.apply(sp, p, key, cost, d)
		case e.expires > now:
			state = e.state[:e.n]
		default:
			state = e.state[:0]
		}
	}
	// The outcome goes through the shard, under its lock: a pointer
	// passed to a function value escapes, and *d would cost an allocation.
	res := &sh.outcome
	size, err := p.take(state, now, cost, res)
	changed := res.Changed
	if err == nil && changed {
		switch {
		case e == nil:
			sh.storeSlot(key, k, 0, false, now, m.cutoff(now), res.TTL, state[:size])
		case res.TTL <= 0 || size == 0:
			sh.remove(k.h, slot)
		default:
			e.n = uint8(size)
			e.expires = saturatingAdd(now, int64(res.TTL))
		}
	}
	// Field by field, for the reason gcra's admitted gives.
	d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter = res.Allowed, res.Remaining, res.RetryAfter, res.ResetAfter
	sh.mu.Unlock()
	if err != nil {
		return fmt.Errorf("key %s: %w", keyfmt.Quote(key), err)
	}
	return nil
}

// invalid returns the error of a take of cost units on key that
// Check.ValidateRequest refuses.
func invalid(key string, cost int64) error {
	c := ratelimit.Check{Key: key, Cost: cost}
	return c.ValidateRequest()
}

// apply is Take on the generic path, through Store.apply.
func (n *Namespace) apply(sp *memSpace, p *Prepared, key string, cost int64, d *decision.Fields) error {
	c := ratelimit.Check{Namespace: n.name, Key: key, Algorithm: p.alg, Limit: p.limit, Cost: cost}
	var o ratelimit.Outcome
	if err := n.m.apply(sp, &c, &o); err != nil {
		return err
	}
	d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter = o.Allowed, o.Remaining, o.RetryAfter, o.ResetAfter
	return nil
}

// DefaultBudget returns 0: the store decides in process and never waits on
// I/O, so a Limiter sets no deadline on its calls (see ratelimit.Budgeter).
func (m *Store) DefaultBudget() time.Duration { return 0 }

// Apply applies c atomically. See ratelimit.Store.
func (m *Store) Apply(ctx context.Context, c ratelimit.Check) (ratelimit.Outcome, error) {
	if err := m.begin(ctx); err != nil {
		return ratelimit.Outcome{}, err
	}
	if err := c.Validate(); err != nil {
		return ratelimit.Outcome{}, err
	}
	var o ratelimit.Outcome
	if err := m.apply(m.space(c.Namespace, true), &c, &o); err != nil {
		return ratelimit.Outcome{}, err
	}
	return o, nil
}

// apply is Apply for a validated check c whose namespace is sp, writing
// the outcome to *res only on success. The Limiter calls it directly, with
// sp looked up once, so that the hot path neither copies the check or the
// outcome nor looks the namespace up again.
func (m *Store) apply(sp *memSpace, c *ratelimit.Check, res *ratelimit.Outcome) error {
	sh, k := m.shard(sp, c.Key)
	sh.mu.Lock()
	now := m.now()
	sh.last = now // see Take
	slot, e := sh.find(c.Key, k)
	sh.in = sh.loadEntry(e, now, sh.in[:0])
	var (
		o   ratelimit.Outcome
		out []byte
		err error
	)
	if c.Op == ratelimit.OpTake { // the hot path, without Evaluate's dispatch
		o, out, err = c.Algorithm.Decide(sh.in, now, c.Limit, c.Cost, sh.out[:0])
	} else {
		o, out, err = ratelimit.Evaluate(c.Algorithm, c.Op, sh.in, now, c.Limit, c.Cost, c.MaxWait, sh.out[:0])
	}
	sh.out = out[:0]
	if err == nil && o.Changed {
		sh.storeSlot(c.Key, k, slot, e != nil, now, m.cutoff(now), o.TTL, out)
	}
	sh.mu.Unlock()
	if err != nil {
		return fmt.Errorf("key %s: %w", keyfmt.Quote(c.Key), err)
	}
	*res = o
	return nil
}

// load appends the live state of key, whose hash is k, to dst.
func (sh *memShard) load(key string, k keyHash, now int64, dst []byte) []byte {
	_, e := sh.find(key, k)
	return sh.loadEntry(e, now, dst)
}

// loadEntry appends the live state of entry e, if not nil, to dst.
func (sh *memShard) loadEntry(e *memEntry, now int64, dst []byte) []byte {
	if e == nil || e.expires <= now {
		return dst
	}
	if e.n == bigState {
		return append(dst, sh.bigs[ref(e.state[:])]...)
	}
	return append(dst, e.state[:e.n]...)
}

// cutoff returns the instant before which expired entries may be
// reclaimed: now minus the grace, saturating at the smallest int64.
func (m *Store) cutoff(now int64) int64 {
	if now < -(1<<63-1)+m.grace {
		return -(1 << 63)
	}
	return now - m.grace
}

// store records the new state of key, whose hash is k, or drops it when
// its TTL is over. Inserts reclaim entries that expired before cutoff.
func (sh *memShard) store(key string, k keyHash, now, cutoff int64, ttl time.Duration, state []byte) {
	i, e := sh.find(key, k)
	sh.storeSlot(key, k, i, e != nil, now, cutoff, ttl, state)
}

// storeSlot is store for a key already looked up: slot i if exists.
func (sh *memShard) storeSlot(key string, k keyHash, i int, exists bool, now, cutoff int64, ttl time.Duration, state []byte) {
	if ttl <= 0 || len(state) == 0 {
		if exists {
			sh.remove(k.h, i)
		}
		return
	}
	if !exists {
		sh.sweep(k.h, cutoff)
		i = sh.insert(key, k, cutoff)
	}
	e := &sh.table(k.h).slots[i]
	e.expires = saturatingAdd(now, int64(ttl))
	if len(state) <= inlineState {
		if e.n == bigState {
			sh.freeBig(e)
		}
		e.n = uint8(len(state))
		copy(e.state[:], state)
		return
	}
	if e.n != bigState {
		var id uint32
		if n := len(sh.bigFree); n > 0 {
			id = sh.bigFree[n-1]
			sh.bigFree = sh.bigFree[:n-1]
		} else {
			id = uint32(len(sh.bigs))
			sh.bigs = append(sh.bigs, nil)
		}
		binary.LittleEndian.PutUint32(e.state[:], id)
		e.n = bigState
	}
	id := ref(e.state[:])
	sh.bigs[id] = append(sh.bigs[id][:0], state...)
}

// freeBig releases the big state of e.
func (sh *memShard) freeBig(e *memEntry) {
	id := ref(e.state[:])
	sh.bigs[id] = nil
	sh.bigFree = append(sh.bigFree, id)
}

// insert gives key, whose hash is k and which the table does not hold, an
// entry with no state yet, and returns its slot. A full table grows,
// dropping what expired before cutoff.
func (sh *memShard) insert(key string, k keyHash, cutoff int64) int {
	r := sh.table(k.h)
	if r.t.count >= r.t.limit {
		sh.grow(r, cutoff)
		r = sh.table(k.h)
	}
	e := memEntry{tag: uint32(k.h >> 32)}
	if len(key) <= inlineKey {
		e.klen = uint8(len(key))
		e.key[0], e.key[1] = k.lo, k.hi
	} else {
		var id uint32
		if n := len(sh.longFree); n > 0 {
			id = sh.longFree[n-1]
			sh.longFree = sh.longFree[:n-1]
			sh.longs[id] = strings.Clone(key)
		} else {
			id = uint32(len(sh.longs))
			sh.longs = append(sh.longs, strings.Clone(key))
		}
		e.klen = longKey
		e.key[0] = uint64(id)
	}
	r.t.count++
	sh.count++
	return place(r.slots, &e)
}

// place puts *e, whose key slots does not hold, into slots, which has a
// free slot, and returns where *e went. Robin Hood: walking from e's home,
// e takes the slot of the first entry nearer its own home than e is, and
// that entry walks on in turn. *e is clobbered.
func place(slots []memEntry, e *memEntry) int {
	n := len(slots)
	i := home(e.tag, n)
	at := -1
	for d := 0; ; d++ {
		s := &slots[i]
		if s.klen == 0 {
			*s = *e
			if at < 0 {
				at = i
			}
			return at
		}
		if sd := dist(s, i, n); sd < d {
			*s, *e = *e, *s
			d = sd
			if at < 0 {
				at = i
			}
		}
		if i++; i == n {
			i = 0
		}
	}
}

// grow makes room in r's table for one more entry: it moves the live
// entries to a table growNum/growDen times larger, or splits a table of
// maxSlots slots in two by one more tag bit, unless dropping the entries
// that expired before cutoff (as sweep would) frees a quarter of the
// table's room, when it moves them to a table of the same size. It
// rehashes nothing: an entry's tag places it.
func (sh *memShard) grow(r *tableRef, cutoff int64) {
	t, old := r.t, r.slots
	var live [2]int // by the tag bit a split would use
	bit := uint32(1) << t.depth
	for i := range old {
		if e := &old[i]; e.klen != 0 && e.expires > cutoff {
			live[b2i(e.tag&bit != 0)]++
		}
	}
	n := len(old)
	switch {
	case live[0]+live[1] < t.limit*3/4:
	case n < maxSlots || t.depth >= maxDepth:
		n = max(minSlots, n*growNum/growDen)
		if len(old) < maxSlots && t.depth < maxDepth {
			n = min(n, maxSlots)
		}
	default:
		sh.split(r, cutoff, live)
		return
	}
	slots := make([]memEntry, n)
	for i := range old {
		e := &old[i]
		switch {
		case e.klen == 0:
		case e.expires <= cutoff:
			sh.drop(e)
		default:
			place(slots, e)
		}
	}
	sh.count -= t.count - live[0] - live[1]
	t.count = live[0] + live[1]
	t.limit = n * maxLoadNum / maxLoadDen
	t.sweepAt = 0
	for j := range sh.dir {
		if sh.dir[j].t == t {
			sh.dir[j].slots = slots
		}
	}
}

// split replaces r's table by two, one for each value of the next tag bit,
// each sized to hold its live entries (live, by that bit) with room for
// growNum/growDen more, and doubles the directory first if the table's
// keys share as many bits as the directory resolves.
func (sh *memShard) split(r *tableRef, cutoff int64, live [2]int) {
	t, old := r.t, r.slots
	if t.depth == sh.depth {
		sh.dir = append(sh.dir, sh.dir...)
		sh.depth++
		sh.mask = uint32(len(sh.dir) - 1)
	}
	bit := uint32(1) << t.depth
	var halves [2]tableRef
	for k := range halves {
		n := max(minSlots, (live[k]+1)*growNum/growDen*maxLoadDen/maxLoadNum+1)
		halves[k] = tableRef{
			slots: make([]memEntry, n),
			t:     &table{count: live[k], limit: n * maxLoadNum / maxLoadDen, depth: t.depth + 1},
		}
	}
	for i := range old {
		e := &old[i]
		switch {
		case e.klen == 0:
		case e.expires <= cutoff:
			sh.drop(e)
		default:
			place(halves[b2i(e.tag&bit != 0)].slots, e)
		}
	}
	sh.count -= t.count - live[0] - live[1]
	for j := range sh.dir {
		if sh.dir[j].t == t {
			sh.dir[j] = halves[b2i(uint32(j)&bit != 0)]
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// drop releases the long key and big state of e.
func (sh *memShard) drop(e *memEntry) {
	if e.n == bigState {
		sh.freeBig(e)
	}
	if e.klen == longKey {
		id := uint32(e.key[0])
		sh.longs[id] = ""
		sh.longFree = append(sh.longFree, id)
	}
}

// remove drops the entry in slot i of hash h's table, with its long key
// and big state, and shifts the entries after it that are not at home back
// by one, so that no probe ever needs a tombstone.
func (sh *memShard) remove(h uint64, i int) {
	r := sh.table(h)
	slots := r.slots
	n := len(slots)
	sh.drop(&slots[i])
	for {
		j := i + 1
		if j == n {
			j = 0
		}
		next := &slots[j]
		if next.klen == 0 || dist(next, j, n) == 0 {
			break
		}
		slots[i] = *next
		i = j
	}
	slots[i] = memEntry{}
	r.t.count--
	sh.count--
}

// sweep examines the next few slots of hash h's table and drops the
// entries that expired before cutoff; called on insert. The examined
// slots wrap around the table, so every entry is examined at least once
// every len(slots)/sweepPerInsert inserts into its table. Each drop is
// paid for by the insert that made the entry, so a sweep costs O(1)
// amortized.
func (sh *memShard) sweep(h uint64, cutoff int64) {
	r := sh.table(h)
	n := len(r.slots)
	if n == 0 {
		return
	}
	i := r.t.sweepAt
	for range sweepPerInsert {
		if i >= n {
			i = 0
		}
		// An entry shifted into slot i by a drop is examined in turn.
		for e := &r.slots[i]; e.klen != 0 && e.expires <= cutoff; {
			sh.remove(h, i)
		}
		i++
	}
	r.t.sweepAt = i
}

func saturatingAdd(a, b int64) int64 {
	if b > 0 && a > (1<<63-1)-b {
		return 1<<63 - 1
	}
	return a + b
}

// ApplyAll applies checks atomically, all or nothing. See ratelimit.Store.
func (m *Store) ApplyAll(ctx context.Context, checks []ratelimit.Check, out []ratelimit.Outcome) (bool, error) {
	if err := m.begin(ctx); err != nil {
		return false, err
	}
	if len(out) < len(checks) {
		return false, fmt.Errorf("%w: %d outcomes for %d checks", ratelimit.ErrInvalidOption, len(out), len(checks))
	}
	shards := make([]*memShard, len(checks))
	hashes := make([]keyHash, len(checks))
	for i := range checks {
		if err := checks[i].Validate(); err != nil {
			return false, fmt.Errorf("check %d: %w", i, err)
		}
		shards[i], hashes[i] = m.shard(m.space(checks[i].Namespace, true), checks[i].Key)
	}
	locks := make([]*sync.Mutex, len(shards))
	for i, sh := range shards {
		locks[i] = &sh.mu
	}
	defer lockorder.Unlock(lockorder.Lock(locks))
	keyOf := make([]int, len(checks))
	first := ratelimit.DistinctKeys(checks, keyOf, make([]int, 0, len(checks)))
	keys := make([]ratelimit.KeyState, len(first))
	now := m.now()
	for _, sh := range shards {
		sh.last = now // see Take
	}
	for j, i := range first {
		keys[j].State = shards[i].load(checks[i].Key, hashes[i], now, nil)
	}
	allowed, err := ratelimit.EvaluateAll(checks, now, keyOf, keys, out, nil)
	if err != nil || !allowed {
		return false, err
	}
	cutoff := m.cutoff(now)
	for j, i := range first {
		if k := &keys[j]; k.Changed {
			shards[i].store(checks[i].Key, hashes[i], now, cutoff, out[k.Last].TTL, k.State)
		}
	}
	return true, nil
}

// Reset deletes the state of key in namespace.
func (m *Store) Reset(ctx context.Context, namespace, key string) error {
	if err := m.begin(ctx); err != nil {
		return err
	}
	if !ratelimit.ValidKey(key) {
		return fmt.Errorf("%w: key length %d outside 1..%d", ratelimit.ErrInvalidKey, len(key), ratelimit.MaxKeyLen)
	}
	sp := m.space(namespace, false)
	if sp == nil {
		return nil
	}
	sh, k := m.shard(sp, key)
	sh.mu.Lock()
	if i, e := sh.find(key, k); e != nil {
		sh.remove(k.h, i)
	}
	sh.mu.Unlock()
	return nil
}

// keys returns the number of keys holding state, expired or not, in all
// namespaces.
func (m *Store) keys() int {
	n := 0
	for _, sp := range *m.spaces.Load() {
		for i := range sp.shards {
			sh := &sp.shards[i]
			sh.mu.Lock()
			n += sh.count
			sh.mu.Unlock()
		}
	}
	return n
}

// Close drops all state. Closing twice is not an error; other calls after
// Close return ratelimit.ErrClosed.
func (m *Store) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	m.mu.Lock()
	empty := map[string]*memSpace{}
	m.spaces.Store(&empty)
	m.mu.Unlock()
	return nil
}

var _ ratelimit.Store = (*Store)(nil)
