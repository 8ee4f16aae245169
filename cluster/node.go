package cluster

import (
	"context"
	"fmt"
	"hash/maphash"
	"io"
	"log"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/sluicehq/sluice/algorithms/catalog"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/keyfmt"
	"github.com/sluicehq/sluice/internal/lockorder"
	"github.com/sluicehq/sluice/internal/muldiv"
)

const (
	shardBits  = 6              // low bits of a key's hash that pick its shard
	shardCount = 1 << shardBits // lock shards per node
	// syncChunk is how many dirty records a sync tick snapshots per hold
	// of a shard's lock, so that a decision on that shard waits for a
	// few records, not for the shard's whole share of the tick.
	syncChunk = 16
	// deferTicks is how many sync intervals a peer's consumption may wait
	// to be charged to a key's view (see deferCharge).
	deferTicks = 4
	inboxSize  = 4096 // gossip messages queued for the merge goroutine
	// spareBuffers is how many handled messages' buffers wait to be
	// reused for the next ones, if each holds at most maxSpareBytes.
	spareBuffers  = 4
	maxSpareBytes = 1 << 20
	// allowanceTicks is how many sync ticks a key a node has never heard
	// of is held to its startup allowance, at least: long enough for every
	// peer's consumption from before the key's creation to arrive (one
	// tick) with room for delivery and scheduling delays up to two more.
	// On a starved machine the ticks themselves stretch, so the allowance
	// also lasts at least allowanceTicks of the longest recent gap between
	// this node's ticks.
	allowanceTicks = 3
	// sweepGraceTicks is how many sync intervals a record stays after its
	// view refilled while idle before the node forgets it: far longer
	// than the views of different nodes can disagree on when that was.
	sweepGraceTicks = 40
	// udpOverhead is what memberlist adds to a user message on the wire
	// (message type, CRC, label header, encryption nonce and tag).
	udpOverhead = 64
	// maxPacketsPerPeer is how many UDP packets one sync may send a peer;
	// beyond it the batch goes as one reliable (TCP) message.
	maxPacketsPerPeer = 32
	// inlineState is how many bytes of state a record holds without a
	// separate allocation: every algorithm of the catalog's state fits.
	inlineState = 32
	// bigState is record.stateLen for a state kept in record.big.
	bigState = 255
)

// Node is one member of a gossip cluster and a ratelimit.Store. It decides
// every check locally, from its own copy of each key's state, with no
// network round trip; a background goroutine sends the consumption it
// admitted to every member each SyncInterval and charges what the others
// admitted to its own copy (see the package documentation for the bound
// this gives).
//
// A Node is safe for concurrent use. Create it with New; release it with
// Leave (graceful) and Close.
type Node struct {
	cfg   Config
	clock ratelimit.Clock
	log   *slog.Logger
	seed  maphash.Seed
	name  string
	addr  string // advertised host:port

	shards [shardCount]shard

	ml *memberlist.Memberlist

	algs sync.Map // algorithm name → ratelimit.Algorithm

	memMu sync.Mutex
	// members holds copies of the live members' memberlist.Node, this
	// node included, taken in NotifyJoin under memberlist's lock: the
	// pointers memberlist.Members returns are updated without a lock
	// memberlist shares.
	members map[string]memberlist.Node
	failed  map[string]int64 // failed (not left) members → wall time of failure
	lost    map[string]lostMember
	left    map[string]int64 // members that announced a graceful leave → wall time
	live    atomic.Int64     // len(members), read on the hot path

	lastInc atomic.Int64 // last record incarnation handed out

	inbox chan inboxItem
	spare chan []byte // buffers of handled messages, for enqueue to reuse
	stop  chan struct{}
	// failedNow wakes refusalLoop when a member fails.
	failedNow chan struct{}
	wg        sync.WaitGroup
	syncMu    sync.Mutex // serialises sync sends (ticker and Leave)
	tickNo    atomic.Uint64
	lastTick  int64 // clock time of the previous tick; syncMu
	sweepAt   int   // next shard to sweep; syncMu
	// out is a sync tick's storage, kept from tick to tick; syncMu.
	out struct {
		entries []wireEntry
		comps   []wireComp
		enc     *encoder
		packets [][]byte
	}

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	stats struct {
		sentBytes, sentPackets, reliable, received, dropped, malformed, capped, reclaimed atomic.Uint64
		maxGap                                                                            atomic.Int64
	}
	// recentGap is the longest recent gap between sync ticks (decaying by
	// a tenth per tick), in wall nanoseconds; syncMu.
	recentGap int64
	lastSync  time.Time // wall time of the previous tick; syncMu
}

// lostMember is a failed member the node tries to reconnect to.
type lostMember struct {
	addr  string
	since int64 // wall time
}

type inboxItem struct {
	b    []byte
	done chan struct{} // non-nil: a barrier, closed when reached
}

type nsKey struct{ ns, key string }

type shard struct {
	mu sync.Mutex
	// slots hold the records by keyHash (see get): the hash computed to
	// pick the shard also places the key in it, so a lookup hashes the
	// key's strings once, and reads one slot before the record.
	slots []slot
	count int       // records in slots
	used  int       // slots holding a record or a tombstone
	dirty []*record // records whose own counter changed since the last sync
	// sending is the dirty list a sync tick is working through, a few
	// records per hold of mu (the tick's own, under syncMu).
	sending []*record
	young   []*record // records under their startup allowance
	scratch []byte
	_       [64]byte
}

// record is a node's view of one key. Guarded by its shard's mutex.
//
// The fields a decision reads come first and fill the first three cache
// lines; the record is 320 bytes, a size class whose objects start on a
// line, so a decision on a key touches three lines of its record.
type record struct {
	hash    uint64 // keyHash(id)
	id      nsKey
	expires int64 // clock time after which the state equals the initial state
	// deferred is units consumed elsewhere and not yet charged to the
	// state (see deferCharge): settle charges them, at deferredAt, the
	// time of the last of them, before the state is next read or
	// written. deferredSince is the time of the first.
	deferred int64
	// Startup allowance of a key this node had never heard of: while
	// allowN > 1 the node admits at most (Burst + r·(now−created))/allowN.
	allowN int64

	// inline holds the state when it fits (stateLen bytes), so that a
	// decision reads no other allocation; a longer one is in big.
	inline  [inlineState]byte
	alg     ratelimit.Algorithm // nil until known (learned from a peer under an unknown name)
	algName string              // alg.Name(), read without a dynamic call

	limit   ratelimit.Limit
	inc     uint64 // incarnation of this node's own counter for the key
	created int64
	taken   int64
	own     uint64 // units this node admitted in incarnation inc
	// stateLen is the length of the state in inline, or bigState.
	stateLen uint8
	dirty    bool
	lifted   bool // the allowance ran out; while the state is empty, rearm leaves it lifted
	// learned marks a key learned from a peer under an algorithm this
	// node could not resolve; its consumption is counted but not charged.
	learned bool

	// The fourth line holds, with deferred, limit and created above,
	// what merging a peer's counters reads.
	deferredAt, deferredSince int64
	// comps are the other origins' components, one per origin: a
	// cluster has few members, and a short slice is scanned faster than
	// a map is hashed, on the merge path, for every entry.
	comps []comp
	// credit is what was charged as the failed members' estimated use
	// (partition scaling) and not yet matched by their real consumption;
	// creditAt is the clock time of the last such charge.
	credit, creditAt int64

	youngTick uint64
	youngWall int64  // wall time the allowance started
	refunded  uint64 // units of own it gave back (OpRefund), ≤ own
	// sentOwn and sentRefunded are own and refunded as last sent by a
	// sync tick, so that a new incarnation can carry what was not sent.
	sentOwn, sentRefunded uint64
	phantom               float64 // fractional partition charge carried over
	big                   []byte  // the state when longer than inlineState
}

type comp struct {
	origin               string
	inc, count, refunded uint64
	at                   int64 // clock time of the last accepted increase; 0 before any
	// owed marks an origin whose estimated use was charged while it was
	// failed: its next increases are netted against the record's credit.
	owed bool
}

// New starts a node: it binds the gossip port, joins cfg.Seeds (if any),
// merges the counters the seeds hold, and starts the sync and merge
// goroutines. It returns an error wrapping ratelimit.ErrInvalidOption for
// an unusable Config and ratelimit.ErrUnavailable when the port cannot be
// bound or no seed answers.
func New(cfg Config) (*Node, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := &Node{
		cfg:     cfg,
		clock:   cfg.Clock,
		log:     cfg.Logger,
		seed:    maphash.MakeSeed(),
		name:    cfg.Name,
		members: map[string]memberlist.Node{cfg.Name: {Name: cfg.Name}},
		failed:  map[string]int64{},
		lost:    map[string]lostMember{},
		left:    map[string]int64{},
		inbox:   make(chan inboxItem, inboxSize),
		spare:   make(chan []byte, spareBuffers),
		stop:    make(chan struct{}),

		failedNow: make(chan struct{}, 1),
	}
	n.cfg.Seeds = slices.Clone(cfg.Seeds)
	n.cfg.SecretKey = slices.Clone(cfg.SecretKey)
	if n.clock == nil {
		n.clock = ratelimit.SystemClock{}
	}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	n.live.Store(1)
	for _, a := range append(catalog.All(), cfg.Algorithms...) {
		if _, ok := a.(ratelimit.Charger); ok {
			n.algs.Store(a.Name(), a)
		}
	}

	var mc memberlist.Config
	if cfg.Memberlist != nil {
		mc = *cfg.Memberlist
	} else {
		mc = *memberlist.DefaultLANConfig()
	}
	mc.Name = cfg.Name
	mc.BindAddr, mc.BindPort = cfg.BindAddr, cfg.BindPort
	mc.AdvertiseAddr, mc.AdvertisePort = cfg.AdvertiseAddr, cfg.AdvertisePort
	if mc.AdvertisePort == 0 {
		mc.AdvertisePort = cfg.BindPort
	}
	mc.Label = cfg.Label
	mc.SecretKey = n.cfg.SecretKey
	mc.Keyring = nil
	if len(n.cfg.SecretKey) != 0 {
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	}
	mc.PushPullInterval = cfg.PushPullInterval
	mc.Delegate = (*delegate)(n)
	mc.Events = (*events)(n)
	mc.Logger = slog.NewLogLogger(n.log.Handler(), slog.LevelDebug)
	if n.log.Handler() == slog.DiscardHandler {
		mc.Logger = log.New(io.Discard, "", 0)
	}
	mc.LogOutput = nil

	ml, err := memberlist.Create(&mc)
	if err != nil {
		return nil, fmt.Errorf("%w: cluster: start memberlist: %w", ratelimit.ErrUnavailable, err)
	}
	n.ml = ml
	ln := ml.LocalNode()
	n.addr = net.JoinHostPort(ln.Addr.String(), strconv.Itoa(int(ln.Port)))
	n.lastTick = n.clock.Now()
	n.wg.Add(4)
	go n.mergeLoop()
	go n.syncLoop()
	go n.reconnectLoop()
	go n.refusalLoop(mc.Transport)
	if len(cfg.Seeds) > 0 {
		if _, err := ml.Join(n.cfg.Seeds); err != nil {
			_ = n.Close()
			return nil, fmt.Errorf("%w: cluster: join %v: %w", ratelimit.ErrUnavailable, cfg.Seeds, err)
		}
		// The join's push/pull queued the seeds' state; wait until it
		// is merged so that the node never serves a key it could know.
		if err := n.barrier(10 * time.Second); err != nil {
			_ = n.Close()
			return nil, err
		}
	}
	return n, nil
}

// barrier waits until the merge goroutine has handled every message
// queued before it.
func (n *Node) barrier(timeout time.Duration) error {
	done := make(chan struct{})
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case n.inbox <- inboxItem{done: done}:
	case <-t.C:
		return fmt.Errorf("%w: cluster: merge queue full", ratelimit.ErrUnavailable)
	}
	select {
	case <-done:
		return nil
	case <-n.stop:
		return ratelimit.ErrClosed
	case <-t.C:
		return fmt.Errorf("%w: cluster: merging the joined state took over %s", ratelimit.ErrUnavailable, timeout)
	}
}

// Name returns the node's name.
func (n *Node) Name() string { return n.name }

// Addr returns the "host:port" address peers reach this node at, the
// value to pass as a seed to other nodes.
func (n *Node) Addr() string {
	return n.addr
}

// Members returns the names of the live members, this node included, in
// no particular order.
func (n *Node) Members() []string {
	n.memMu.Lock()
	defer n.memMu.Unlock()
	out := make([]string, 0, len(n.members))
	for m := range n.members {
		out = append(out, m)
	}
	return out
}

// Stats are counters a Node keeps for tests and metrics. All are totals
// since New.
type Stats struct {
	// Members is the number of live members, this node included.
	Members int
	// RefMembers is N_ref: live members plus failed ones still held.
	RefMembers int
	// SentBytes and SentPackets count sync payload bytes and messages
	// sent (each copy to each member counts).
	SentBytes, SentPackets uint64
	// Reliable counts sync batches sent over TCP because they were too
	// large for UDP.
	Reliable uint64
	// Received counts gossip messages merged; Dropped those lost to a full
	// queue; Malformed those that failed to decode.
	Received, Dropped, Malformed uint64
	// Capped counts counter increases cut to the plausible maximum.
	Capped uint64
	// Reclaimed counts failed members whose share was reclaimed before
	// FailedHold ran out because their gossip port refused a connection
	// (their process is gone).
	Reclaimed uint64
	// MaxSyncGap is the longest wall time between two sync ticks: the
	// real S in the bound when the machine is busy (a starved process
	// sends late).
	MaxSyncGap time.Duration
}

// Stats returns the node's counters. It is safe for concurrent use.
func (n *Node) Stats() Stats {
	vis, ref := n.visibility()
	return Stats{
		Members:     vis,
		RefMembers:  ref,
		SentBytes:   n.stats.sentBytes.Load(),
		SentPackets: n.stats.sentPackets.Load(),
		Reliable:    n.stats.reliable.Load(),
		Received:    n.stats.received.Load(),
		Dropped:     n.stats.dropped.Load(),
		Malformed:   n.stats.malformed.Load(),
		Capped:      n.stats.capped.Load(),
		Reclaimed:   n.stats.reclaimed.Load(),
		MaxSyncGap:  time.Duration(n.stats.maxGap.Load()),
	}
}

// keyHash hashes a namespace and key: its low bits pick the shard and
// the whole is the key of the shard's map.
func (n *Node) keyHash(ns, key string) uint64 {
	h := maphash.String(n.seed, key)
	if ns != "" {
		h ^= maphash.String(n.seed, ns) * 0x9e3779b97f4a7c15
	}
	return h
}

// locate returns the shard of ns/key and the key's hash.
func (n *Node) locate(ns, key string) (*shard, uint64) {
	h := n.keyHash(ns, key)
	return &n.shards[h&(shardCount-1)], h
}

// shardOf returns the shard rec lives in.
func (n *Node) shardOf(rec *record) *shard { return &n.shards[rec.hash&(shardCount-1)] }

func (n *Node) begin(ctx context.Context) error {
	if n.closed.Load() {
		return fmt.Errorf("cluster: node %s: %w", n.name, ratelimit.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return nil
}

// supported reports whether the cluster can apply c: its algorithm must
// be a Charger.
func supported(c *ratelimit.Check) error {
	if _, ok := c.Algorithm.(ratelimit.Charger); !ok {
		return fmt.Errorf("%w: cluster: algorithm %s cannot charge consumption seen elsewhere", ratelimit.ErrUnsupported, c.Algorithm.Name())
	}
	return nil
}

// Apply applies c on this node at once, from its local copy of the key.
// See ratelimit.Store. It returns ErrUnsupported for algorithms that are
// not a ratelimit.Charger, and for operations the algorithm lacks.
func (n *Node) Apply(ctx context.Context, c ratelimit.Check) (ratelimit.Outcome, error) {
	if err := n.begin(ctx); err != nil {
		return ratelimit.Outcome{}, err
	}
	if err := c.Validate(); err != nil {
		return ratelimit.Outcome{}, err
	}
	if err := supported(&c); err != nil {
		return ratelimit.Outcome{}, err
	}
	sh, h := n.locate(c.Namespace, c.Key)
	sh.mu.Lock()
	now := n.clock.Now()
	rec := sh.get(h, c.Namespace, c.Key)
	if rec != nil {
		n.settle(sh, rec)
	}
	if rec == nil && c.Cost == 0 && c.Op == ratelimit.OpTake {
		// A peek at a key without state creates nothing.
		o, out, err := ratelimit.Evaluate(c.Algorithm, c.Op, nil, now, c.Limit, 0, 0, sh.scratch[:0])
		sh.scratch = out[:0]
		sh.mu.Unlock()
		return o, wrapKey(c.Key, err)
	}
	if rec == nil {
		rec = n.newLocalRecord(sh, h, c.Namespace, c.Key, now)
		sh.put(rec)
	} else if rec.expires <= now && c.Cost > 0 {
		n.rearm(sh, rec, now)
	}
	n.adopt(rec, &c, now)
	state := rec.live(now)
	var o ratelimit.Outcome
	out, used, err := n.evaluate(&o, rec, &c, now, state, 0, sh.scratch[:0])
	if err == nil {
		if o.Changed {
			rec.setState(out, now, o.TTL)
		}
		n.consumed(sh, rec, used)
	}
	sh.scratch = out[:0]
	sh.mu.Unlock()
	return o, wrapKey(c.Key, err)
}

func wrapKey(key string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("cluster: key %s: %w", keyfmt.Quote(key), err)
}

// newLocalRecord creates the record of a key this node has never heard
// of. Its bucket starts full (it is the node's view of the global bucket)
// and the startup allowance keeps the node to its share until the peers'
// consumption has had time to arrive.
func (n *Node) newLocalRecord(sh *shard, h uint64, ns, key string, now int64) *record {
	rec := newRecord(ns, key, h, now)
	rec.allowN, rec.youngTick, rec.youngWall = n.live.Load(), n.tickNo.Load(), time.Now().UnixNano()
	rec.inc = n.nextInc()
	if rec.allowN > 1 {
		sh.young = append(sh.young, rec)
	}
	return rec
}

// newRecord returns the empty record of ns/key, whose hash is h, created
// at now.
func newRecord(ns, key string, h uint64, now int64) *record {
	return &record{id: nsKey{ns, key}, hash: h, created: now}
}

// setAlg makes a the record's algorithm (nil: unknown).
func (r *record) setAlg(a ratelimit.Algorithm) {
	r.alg, r.algName = a, ""
	if a != nil {
		r.algName = a.Name()
	}
}

// rearm gives the startup allowance again to a key whose view has been
// full and idle long enough for its state to expire: every node's view of
// it has refilled, so a burst on all nodes at once is the cold-start case
// and gets the same split. The caller holds sh.mu.
func (n *Node) rearm(sh *shard, rec *record, now int64) {
	if rec.allowN > 1 || (rec.lifted && rec.stateLen == 0) {
		// Still under its allowance, or never admitted anything since
		// its allowance lifted: re-arming would hold a take above the
		// share back for ever.
		return
	}
	rec.created, rec.allowN, rec.taken = now, n.live.Load(), 0
	rec.youngTick, rec.youngWall = n.tickNo.Load(), time.Now().UnixNano()
	if rec.allowN > 1 {
		sh.young = append(sh.young, rec)
	}
	n.newEpoch(rec)
}

// newEpoch starts a new incarnation of this node's own counter for a key
// whose view refilled while idle. What the old incarnation counted was
// consumed before the refill and no longer matters to the bucket, but a
// peer that has forgotten the key (swept it while idle) has no baseline
// for it and would charge all of it again, leaving its view below the
// others' for as long as demand keeps the key busy. A new incarnation
// makes the peers count from zero; units admitted but not yet sent carry
// over, so none is lost. Components of other origins from before the
// refill are not relayed from now on (see entryOf), for the same reason.
// The caller holds the record's shard lock.
func (n *Node) newEpoch(rec *record) {
	unsent := int64(rec.own-rec.refunded) - int64(rec.sentOwn-rec.sentRefunded)
	rec.inc = n.nextInc()
	rec.own, rec.refunded = uint64(max(unsent, 0)), 0
	rec.sentOwn, rec.sentRefunded = 0, 0
}

// nextInc returns a record incarnation larger than every earlier one of
// this node, and than those of an earlier process under the same name
// (it starts from the wall clock).
func (n *Node) nextInc() uint64 {
	now := time.Now().UnixNano()
	for {
		last := n.lastInc.Load()
		next := max(now, last+1)
		if n.lastInc.CompareAndSwap(last, next) {
			return uint64(next)
		}
	}
}

// adopt makes c's algorithm and limit the record's rule.
func (n *Node) adopt(rec *record, c *ratelimit.Check, now int64) {
	if rec.alg == nil || rec.algName != c.Algorithm.Name() {
		n.algs.LoadOrStore(c.Algorithm.Name(), c.Algorithm)
		unresolved := rec.alg == nil && rec.learned
		rec.setAlg(c.Algorithm)
		if unresolved {
			// Learned from a peer under an algorithm this node could not
			// resolve, so its level is unknown: treat it as a key never
			// heard of, with a full view and the startup allowance.
			rec.clearState()
			rec.learned = false
			rec.created, rec.allowN, rec.taken = now, n.live.Load(), 0
			rec.youngTick, rec.youngWall = n.tickNo.Load(), time.Now().UnixNano()
			if rec.allowN > 1 {
				sh := n.shardOf(rec)
				sh.young = append(sh.young, rec)
			}
		}
	}
	if rec.inc == 0 {
		rec.inc = n.nextInc()
	}
	rec.limit = c.Limit
}

// comp returns the component of origin, or nil.
func (r *record) comp(origin string) *comp {
	for i := range r.comps {
		if r.comps[i].origin == origin {
			return &r.comps[i]
		}
	}
	return nil
}

// addComp adds an empty component for origin, which must have none, and
// returns it. It moves the other components: pointers to them are stale.
func (r *record) addComp(origin string) *comp {
	r.comps = append(r.comps, comp{origin: origin})
	return &r.comps[len(r.comps)-1]
}

// live returns the state at now: nil once it has expired.
func (r *record) live(now int64) []byte {
	if r.expires <= now {
		return nil
	}
	if r.stateLen == bigState {
		return r.big
	}
	return r.inline[:r.stateLen]
}

// setState stores s, which the record keeps until ttl after now.
func (r *record) setState(s []byte, now int64, ttl time.Duration) {
	if len(s) <= inlineState {
		r.stateLen = uint8(copy(r.inline[:], s))
	} else {
		r.big = append(r.big[:0], s...)
		r.stateLen = bigState
	}
	r.expires = satAdd(now, int64(ttl))
	if ttl <= 0 || len(s) == 0 {
		r.expires = 0
	}
}

// clearState drops the state: the key is back to its initial state.
func (r *record) clearState() { r.stateLen, r.expires = 0, 0 }

func satAdd(a, b int64) int64 {
	if b > 0 && a > (1<<63-1)-b {
		return 1<<63 - 1
	}
	return a + b
}

// evaluate applies c to state without changing rec, writing the outcome
// to *o. pending is units taken by earlier checks of the same composite.
// It returns the new state (in dst) and the units this node consumed
// (negative for a refund). The outcome goes through a pointer, not a
// result, so that the hot path copies it once rather than at every level.
func (n *Node) evaluate(o *ratelimit.Outcome, rec *record, c *ratelimit.Check, now int64, state []byte, pending int64, dst []byte) ([]byte, int64, error) {
	taking := (c.Op == ratelimit.OpTake || c.Op == ratelimit.OpReserve) && c.Cost > 0
	// Within its share of the burst alone a take needs no refill computed.
	if need := rec.taken + pending + c.Cost; taking && rec.allowN > 1 && c.Cost <= c.Limit.Burst && need > c.Limit.Burst/rec.allowN {
		if allow := allowance(rec, c.Limit, now); need > allow {
			peek, out, err := ratelimit.Evaluate(c.Algorithm, ratelimit.OpTake, state, now, c.Limit, 0, 0, dst)
			if err != nil {
				*o = ratelimit.Outcome{}
				return out, 0, err
			}
			*o = ratelimit.Outcome{
				Remaining:  min(max(allow-rec.taken-pending, 0), peek.Remaining),
				RetryAfter: max(n.cfg.SyncInterval*allowanceTicks, peek.RetryAfter, 1),
				ResetAfter: peek.ResetAfter,
				TTL:        peek.TTL,
			}
			return out, 0, nil
		}
	}
	var (
		out []byte
		err error
	)
	if c.Op == ratelimit.OpTake { // the hot path, without Evaluate's dispatch
		*o, out, err = c.Algorithm.Decide(state, now, c.Limit, c.Cost, dst)
	} else {
		*o, out, err = ratelimit.Evaluate(c.Algorithm, c.Op, state, now, c.Limit, c.Cost, c.MaxWait, dst)
	}
	if err != nil {
		return out, 0, err
	}
	var used int64
	switch {
	case (taking && o.Allowed) || c.Op == ratelimit.OpCharge:
		used = c.Cost
	case c.Op == ratelimit.OpRefund:
		used = -c.Cost
	}
	return out, used, nil
}

// allowance is how many units a node may have taken under its startup
// allowance at now: its 1/allowN share of the burst plus the refill since
// the key was created.
func allowance(rec *record, l ratelimit.Limit, now int64) int64 {
	refill := muldiv.Floor(l.Count, max(now-rec.created, 0), int64(l.Period))
	total := l.Burst + min(refill, ratelimit.MaxCount)
	return (total + rec.allowN - 1) / rec.allowN
}

// consumed records units this node admitted for rec (refunded, when
// used is negative), to be sent at the next sync.
func (n *Node) consumed(sh *shard, rec *record, used int64) {
	switch {
	case used > 0:
		rec.own += uint64(used)
		rec.taken += used
	case used < 0:
		// Never refund more than was taken, so the counters a peer
		// receives always satisfy refunded ≤ taken.
		back := min(uint64(-used), rec.own-rec.refunded)
		if back == 0 {
			return
		}
		rec.refunded += back
		rec.taken = max(rec.taken-int64(back), 0)
	default:
		return
	}
	if !rec.dirty {
		rec.dirty = true
		sh.dirty = append(sh.dirty, rec)
	}
}

// ApplyAll applies checks on this node as one atomic step, all or
// nothing. See ratelimit.Store. Atomicity is local: another node may admit
// the same keys concurrently within the documented bound.
func (n *Node) ApplyAll(ctx context.Context, checks []ratelimit.Check, out []ratelimit.Outcome) (bool, error) {
	if err := n.begin(ctx); err != nil {
		return false, err
	}
	if len(out) < len(checks) {
		return false, fmt.Errorf("%w: %d outcomes for %d checks", ratelimit.ErrInvalidOption, len(out), len(checks))
	}
	shards := make([]*shard, len(checks))
	hashes := make([]uint64, len(checks))
	for i := range checks {
		if err := checks[i].Validate(); err != nil {
			return false, fmt.Errorf("check %d: %w", i, err)
		}
		if err := supported(&checks[i]); err != nil {
			return false, fmt.Errorf("check %d: %w", i, err)
		}
		shards[i], hashes[i] = n.locate(checks[i].Namespace, checks[i].Key)
	}
	locks := make([]*sync.Mutex, len(shards))
	for i, sh := range shards {
		locks[i] = &sh.mu
	}
	defer lockorder.Unlock(lockorder.Lock(locks))
	now := n.clock.Now()
	keyOf := make([]int, len(checks))
	first := ratelimit.DistinctKeys(checks, keyOf, make([]int, 0, len(checks)))
	recs := make([]*record, len(first))
	keys := make([]ratelimit.KeyState, len(first))
	var created []*record
	for i := range checks {
		c := &checks[i]
		rec := shards[i].get(hashes[i], c.Namespace, c.Key)
		if rec != nil {
			n.settle(shards[i], rec)
		}
		if rec == nil {
			rec = newRecord(c.Namespace, c.Key, hashes[i], now)
			rec.allowN = n.live.Load()
			shards[i].put(rec)
			created = append(created, rec)
		} else if rec.expires <= now && c.Cost > 0 {
			n.rearm(shards[i], rec, now)
		}
		if j := keyOf[i]; recs[j] == nil {
			recs[j], keys[j].State = rec, rec.live(now)
		}
	}
	used := make([]int64, len(first)) // units each key's checks consumed
	allowed, err := ratelimit.EvaluateAll(checks, now, keyOf, keys, out, func(i int, state, dst []byte) (ratelimit.Outcome, []byte, error) {
		j := keyOf[i]
		var o ratelimit.Outcome
		next, u, err := n.evaluate(&o, recs[j], &checks[i], now, state, used[j], dst)
		used[j] += u
		return o, next, err
	})
	if err != nil {
		n.dropCreated(created)
		return false, fmt.Errorf("cluster: %w", err)
	}
	if !allowed {
		// Keep the records created here under their allowance, so that
		// the allowance runs out instead of restarting at every retry.
		for _, r := range created {
			if r.allowN > 1 {
				sh := n.shardOf(r)
				r.youngTick, r.youngWall = n.tickNo.Load(), time.Now().UnixNano()
				sh.young = append(sh.young, r)
			} else {
				n.dropCreated([]*record{r})
			}
		}
		return false, nil
	}
	for i := range checks {
		n.adopt(recs[keyOf[i]], &checks[i], now)
	}
	for j, rec := range recs {
		sh := shards[first[j]]
		if k := &keys[j]; k.Changed {
			rec.setState(k.State, now, out[k.Last].TTL)
		}
		n.consumed(sh, rec, used[j])
		if rec.allowN > 1 && slices.Contains(created, rec) {
			rec.youngTick, rec.youngWall = n.tickNo.Load(), time.Now().UnixNano()
			sh.young = append(sh.young, rec)
		}
	}
	return true, nil
}

// dropCreated removes records a failed composite created. The caller
// holds their shards' locks.
func (n *Node) dropCreated(created []*record) {
	for _, r := range created {
		n.shardOf(r).remove(r)
	}
}

// Reset makes key in namespace fully available again on this node and
// asks every live member to do the same; consumption admitted elsewhere
// before the peers see the reset may still be charged afterwards.
func (n *Node) Reset(ctx context.Context, namespace, key string) error {
	if err := n.begin(ctx); err != nil {
		return err
	}
	if !ratelimit.ValidKey(key) {
		return fmt.Errorf("%w: key length %d outside 1..%d", ratelimit.ErrInvalidKey, len(key), ratelimit.MaxKeyLen)
	}
	if len(namespace) > ratelimit.MaxKeyLen {
		return fmt.Errorf("%w: namespace length %d over %d", ratelimit.ErrInvalidKey, len(namespace), ratelimit.MaxKeyLen)
	}
	n.resetLocal(namespace, key)
	msg := encodeReset(namespace, key)
	for _, m := range n.peers() {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("cluster: reset sent to some members only: %w", err)
		}
		if err := n.ml.SendBestEffort(&m, msg); err != nil {
			n.log.Warn("cluster: reset not sent", "member", m.Name, "err", err)
		}
	}
	return nil
}

func (n *Node) resetLocal(ns, key string) {
	sh, h := n.locate(ns, key)
	sh.mu.Lock()
	if rec := sh.get(h, ns, key); rec != nil {
		rec.clearState()
		rec.allowN, rec.taken, rec.phantom = 0, 0, 0
		rec.deferred = 0
	}
	sh.mu.Unlock()
}

// Leave sends this node's unsent consumption, then tells the cluster it is
// leaving and waits up to timeout for that to spread. The members stop
// counting it toward N_ref at once (no partition scaling for it). Call
// Close afterwards. Leave after Close returns ErrClosed.
func (n *Node) Leave(timeout time.Duration) error {
	if n.closed.Load() {
		return fmt.Errorf("cluster: node %s: %w", n.name, ratelimit.ErrClosed)
	}
	n.syncOnce()
	// Tell the members first, so that they reclaim this node's share at
	// once instead of holding it as a failed member's.
	msg := encodeLeave(n.name)
	for _, m := range n.peers() {
		if err := n.ml.SendReliable(&m, msg); err != nil {
			n.log.Debug("cluster: leave notice not sent", "member", m.Name, "err", err)
		}
	}
	if err := n.ml.Leave(timeout); err != nil {
		return fmt.Errorf("%w: cluster: leave: %w", ratelimit.ErrUnavailable, err)
	}
	return nil
}

// Close stops the node at once, without a graceful leave: the other
// members detect it as failed (use Leave first to leave gracefully). It
// stops every goroutine the node started, waiting for a reconnect attempt
// in flight (at most memberlist's TCPTimeout). Closing twice is not an
// error; other calls after Close return ErrClosed.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.closed.Store(true)
		if err := n.ml.Shutdown(); err != nil {
			n.closeErr = fmt.Errorf("%w: cluster: shutdown: %w", ratelimit.ErrUnavailable, err)
		}
		close(n.stop)
		n.wg.Wait()
	})
	return n.closeErr
}

// visibility returns the live member count and N_ref.
func (n *Node) visibility() (live, ref int) {
	n.memMu.Lock()
	defer n.memMu.Unlock()
	now := time.Now().UnixNano()
	for name, at := range n.failed {
		if now-at > int64(n.cfg.FailedHold) {
			delete(n.failed, name)
		}
	}
	return len(n.members), len(n.members) + len(n.failed)
}

// peers returns copies of the live members other than this node.
func (n *Node) peers() []memberlist.Node {
	n.memMu.Lock()
	defer n.memMu.Unlock()
	out := make([]memberlist.Node, 0, len(n.members))
	for name, m := range n.members {
		if name != n.name {
			out = append(out, m)
		}
	}
	return out
}

// failedNames returns the members held in N_ref after failing.
func (n *Node) failedNames() []string {
	n.memMu.Lock()
	defer n.memMu.Unlock()
	out := make([]string, 0, len(n.failed))
	for name := range n.failed {
		out = append(out, name)
	}
	return out
}

// lookupAlg resolves an algorithm name learned from a peer.
func (n *Node) lookupAlg(name string) ratelimit.Algorithm {
	if a, ok := n.algs.Load(name); ok {
		return a.(ratelimit.Algorithm)
	}
	return nil
}

var _ ratelimit.Store = (*Node)(nil)

// resetMaxSyncGap restarts the MaxSyncGap measurement. It is for tests.
func (n *Node) resetMaxSyncGap() { n.stats.maxGap.Store(0) }

// counters returns, for every key in namespace ns, the counter of every
// origin this node knows, its own included. It is for tests.
func (n *Node) counters(ns string) map[string]map[string]uint64 {
	out := map[string]map[string]uint64{}
	for i := range n.shards {
		sh := &n.shards[i]
		sh.mu.Lock()
		sh.each(func(r *record) {
			if r.id.ns != ns {
				return
			}
			m := map[string]uint64{}
			if r.inc != 0 {
				m[n.name] = r.own
			}
			for _, c := range r.comps {
				m[c.origin] = c.count
			}
			out[r.id.key] = m
		})
		sh.mu.Unlock()
	}
	return out
}
