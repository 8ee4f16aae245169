package cluster

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/keyfmt"
	"github.com/sluicehq/sluice/internal/muldiv"
)

// delegate receives memberlist's data callbacks. None of them blocks:
// messages are copied and queued for the merge goroutine.
type delegate Node

// NodeMeta returns no metadata.
func (d *delegate) NodeMeta(limit int) []byte { return nil }

// NotifyMsg queues a sync or reset message, dropping it when the queue is
// full (the counters it carries are sent again with the next change and
// by push/pull).
func (d *delegate) NotifyMsg(b []byte) { (*Node)(d).enqueue(b) }

// GetBroadcasts returns nothing: sync messages go straight to every
// member instead of riding memberlist's gossip.
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState returns the counters of every key in use (idle, fully
// refilled keys are left out) for a push/pull exchange.
func (d *delegate) LocalState(join bool) []byte { return (*Node)(d).encodeState() }

// MergeRemoteState queues a peer's full state.
func (d *delegate) MergeRemoteState(buf []byte, join bool) { (*Node)(d).enqueue(buf) }

func (n *Node) enqueue(b []byte) {
	if len(b) > n.cfg.MaxMessageBytes {
		n.stats.malformed.Add(1)
		return
	}
	var buf []byte
	select {
	case buf = <-n.spare:
	default:
	}
	select {
	case n.inbox <- inboxItem{b: append(buf[:0], b...)}:
	default:
		n.stats.dropped.Add(1)
	}
}

// recycle offers the buffer of a handled message to enqueue. Nothing
// refers to it any more: the decoded entries are released when handle
// returns, and a record copies the strings it keeps.
func (n *Node) recycle(b []byte) {
	if cap(b) > maxSpareBytes {
		return
	}
	select {
	case n.spare <- b:
	default:
	}
}

// events tracks membership. memberlist calls it from several goroutines,
// never concurrently; it only updates maps under memMu.
type events Node

// NotifyJoin records a live member, which ends any partition charge for
// it.
func (e *events) NotifyJoin(m *memberlist.Node) {
	n := (*Node)(e)
	n.memMu.Lock()
	defer n.memMu.Unlock()
	delete(n.failed, m.Name)
	delete(n.lost, m.Name)
	delete(n.left, m.Name)
	n.members[m.Name] = *m
	n.live.Store(int64(len(n.members)))
}

// NotifyLeave removes a member. One that failed rather than announced a
// leave stays in N_ref for FailedHold, and the node tries to reconnect to
// it for ReconnectTimeout (memberlist alone does not merge the sides of a
// healed partition).
func (e *events) NotifyLeave(m *memberlist.Node) {
	n := (*Node)(e)
	n.memMu.Lock()
	defer n.memMu.Unlock()
	if m.Name == n.name {
		return
	}
	delete(n.members, m.Name)
	if _, ok := n.left[m.Name]; ok {
		// It announced a graceful leave (memberlist's Node.State does
		// not tell a leave from a failure).
		delete(n.left, m.Name)
	} else {
		now := time.Now().UnixNano()
		if n.cfg.FailedHold > 0 {
			n.failed[m.Name] = now
			select {
			case n.failedNow <- struct{}{}:
			default:
			}
		}
		n.lost[m.Name] = lostMember{addr: m.Address(), since: now}
	}
	n.live.Store(int64(len(n.members)))
}

// NotifyUpdate refreshes the copy of a member whose address or metadata
// changed.
func (e *events) NotifyUpdate(m *memberlist.Node) {
	n := (*Node)(e)
	n.memMu.Lock()
	defer n.memMu.Unlock()
	if _, ok := n.members[m.Name]; ok {
		n.members[m.Name] = *m
	}
}

func (n *Node) syncLoop() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			n.syncOnce()
		}
	}
}

// syncOnce runs one sync tick: it lifts expired startup allowances,
// applies the partition charge, sweeps idle records, and sends the
// counters of every key this node consumed since the last tick to every
// member.
func (n *Node) syncOnce() {
	n.syncMu.Lock()
	defer n.syncMu.Unlock()
	tick := n.tickNo.Add(1)
	wall := time.Now()
	if !n.lastSync.IsZero() {
		gap := int64(wall.Sub(n.lastSync))
		if gap > n.stats.maxGap.Load() {
			n.stats.maxGap.Store(gap)
		}
		n.recentGap = max(gap, n.recentGap-n.recentGap/10)
	}
	n.lastSync = wall
	hold := allowanceTicks * max(n.recentGap, int64(n.cfg.SyncInterval))
	now := n.clock.Now()
	elapsed := max(now-n.lastTick, 0)
	n.lastTick = now
	live, ref := n.visibility()
	share := 0.0 // fraction of refill to charge as the invisible members' use
	var failed []string
	if ref > live {
		share = float64(ref-live) / float64(ref)
		failed = n.failedNames()
	}
	entries, comps := n.out.entries[:0], n.out.comps[:0]
	// An idle record is forgotten only once every peer's view of it has
	// surely refilled too, so that none of them still counts on an
	// incarnation from before the refill (see newEpoch).
	grace := sweepGraceTicks * max(n.recentGap, int64(n.cfg.SyncInterval))
	sweep := n.sweepAt
	n.sweepAt = (n.sweepAt + 1) % shardCount
	for i := range n.shards {
		sh := &n.shards[i]
		sh.mu.Lock()
		locked := max(now, n.clock.Now())
		kept := sh.young[:0]
		for _, r := range sh.young {
			if r.allowN > 1 && (tick < r.youngTick+allowanceTicks+1 || wall.UnixNano()-r.youngWall < hold) {
				kept = append(kept, r)
			} else {
				r.allowN, r.lifted = 0, true
			}
		}
		clear(sh.young[len(kept):])
		sh.young = kept
		entries, comps = n.snapshotDirty(sh, now, locked, entries, comps)
		if share > 0 || i == sweep {
			sh.each(func(r *record) {
				n.settle(sh, r)
				if share > 0 && r.alg != nil && r.expires > now {
					n.partitionCharge(sh, r, now, elapsed, share, failed)
				}
				if i == sweep && satAdd(r.expires, grace) <= now && !r.dirty && r.allowN <= 1 {
					sh.remove(r)
				}
			})
		}
		sh.mu.Unlock()
	}
	if len(entries) > 0 {
		n.send(entries)
	}
	// Keep the storage for the next tick, without the references.
	clear(entries)
	clear(comps)
	n.out.entries, n.out.comps = entries[:0], comps[:0]
}

// snapshotDirty appends an entry for every record of sh dirtied since the
// last tick. The caller holds sh.mu, read locked after taking it, and
// holds it again on return; in between, the lock is released after every
// syncChunk records, so that a decision on the shard waits for a few
// records rather than for the shard's whole share of the tick. A record
// dirtied again before its chunk is snapshotted keeps its flag, so it
// stays in the list and is sent with its newest counters; one dirtied
// after its chunk joins the new list, for the next tick.
func (n *Node) snapshotDirty(sh *shard, now, locked int64, entries []wireEntry, comps []wireComp) ([]wireEntry, []wireComp) {
	sh.dirty, sh.sending = sh.sending[:0], sh.dirty
	for i, r := range sh.sending {
		if i > 0 && i%syncChunk == 0 {
			sh.mu.Unlock()
			sh.mu.Lock()
			locked = max(now, n.clock.Now())
		}
		r.dirty = false
		var en wireEntry
		var ok bool
		if en, comps, ok = n.entryOf(r, locked, sh, comps); ok {
			entries = append(entries, en)
			r.sentOwn, r.sentRefunded = r.own, r.refunded
		}
	}
	clear(sh.sending)
	sh.sending = sh.sending[:0]
	return entries, comps
}

// partitionCharge charges rec with the refill the invisible members would
// have used, r·elapsed·share, carrying the fraction to the next tick. The
// amount goes into the record's credit, owed by the failed members
// together: when they come back, their real consumption is charged only
// beyond it, whichever of them used it.
func (n *Node) partitionCharge(sh *shard, r *record, now, elapsed int64, share float64, failed []string) {
	r.phantom += float64(r.limit.Count) * float64(elapsed) / float64(r.limit.Period) * share
	whole := int64(r.phantom)
	if whole <= 0 {
		return
	}
	r.phantom -= float64(whole)
	n.charge(sh, r, now, whole)
	if len(failed) == 0 {
		return
	}
	r.credit, r.creditAt = r.credit+whole, now
	for _, name := range failed {
		c := r.comp(name)
		if c == nil {
			c = r.addComp(name)
		}
		c.owed = true
	}
}

// entryOf snapshots rec's counters for the wire, appending its
// components to comps (returned, grown). The caller holds sh.mu and read
// now after taking it: a take between an earlier reading and the lock
// would be later than now, and a level read before it would be short.
func (n *Node) entryOf(r *record, now int64, sh *shard, comps []wireComp) (wireEntry, []wireComp, bool) {
	if r.alg == nil {
		return wireEntry{}, comps, false
	}
	n.settle(sh, r)
	// An expired state is the initial one, which holds the whole burst
	// (TestInitialStateFull): the algorithm is asked only about a live
	// one.
	remaining := r.limit.Burst
	if state := r.live(now); state != nil {
		peek, out, err := ratelimit.Evaluate(r.alg, ratelimit.OpTake, state, now, r.limit, 0, 0, sh.scratch[:0])
		sh.scratch = out[:0]
		remaining = peek.Remaining
		if err != nil {
			remaining = 0
		}
	}
	en := wireEntry{
		rule:      wireRule{ns: r.id.ns, alg: r.algName, limit: r.limit},
		key:       r.id.key,
		remaining: remaining,
	}
	first := len(comps)
	if r.inc != 0 {
		comps = append(comps, wireComp{origin: n.name, inc: r.inc, count: r.own, refunded: r.refunded})
	}
	for i := range r.comps {
		// A component unchanged since the view refilled while idle (the
		// record's epoch, see newEpoch) counts consumption that no
		// longer matters; a peer that forgot the key would charge it.
		if c := &r.comps[i]; c.inc != 0 && c.at >= r.created {
			comps = append(comps, wireComp{origin: c.origin, inc: c.inc, count: c.count, refunded: c.refunded})
		}
	}
	// Earlier entries keep the array they were appended to when comps
	// grows; the full slice expression keeps later appends out of this
	// entry's.
	en.comps = comps[first:len(comps):len(comps)]
	return en, comps, true
}

// send delivers entries to every other live member: UDP packets that fit
// memberlist's buffer, or one reliable message when there are too many.
func (n *Node) send(entries []wireEntry) {
	members := n.peers()
	if len(members) == 0 {
		return
	}
	udp := n.udpLimit()
	if n.out.enc == nil {
		n.out.enc = newEncoder(kindSync, 0)
	}
	enc := n.out.enc
	// memberlist copies what it sends, so the packets' buffers are
	// reused from tick to tick.
	pack := func(limit int) [][]byte {
		enc.limit = limit
		out := n.out.packets[:0]
		next := func() {
			if len(out) < cap(out) {
				out = out[:len(out)+1]
			} else {
				out = append(out, nil)
			}
			out[len(out)-1] = enc.finishTo(out[len(out)-1][:0])
		}
		for i := range entries {
			if !enc.add(&entries[i]) {
				next()
				enc.add(&entries[i])
			}
		}
		next()
		n.out.packets = out
		return out
	}
	// An entry takes at least minEntryBytes, so a batch that certainly
	// needs more than maxPacketsPerPeer packets goes to TCP without being
	// packed for UDP first.
	const minEntryBytes = 12
	var packets [][]byte
	reliable := len(entries)*minEntryBytes > maxPacketsPerPeer*udp
	if !reliable {
		packets = pack(udp)
		reliable = len(packets) > maxPacketsPerPeer
	}
	if reliable {
		packets = pack(n.cfg.MaxMessageBytes)
	}
	for _, m := range members {
		for _, p := range packets {
			var err error
			if reliable || len(p) > udp {
				n.stats.reliable.Add(1)
				err = n.ml.SendReliable(&m, p)
			} else {
				err = n.ml.SendBestEffort(&m, p)
			}
			if err != nil {
				n.log.Debug("cluster: sync not sent", "member", m.Name, "err", err)
				break
			}
			n.stats.sentBytes.Add(uint64(len(p)))
			n.stats.sentPackets.Add(1)
		}
	}
}

func (n *Node) udpLimit() int {
	size := 1400
	if n.cfg.Memberlist != nil && n.cfg.Memberlist.UDPBufferSize > 0 {
		size = n.cfg.Memberlist.UDPBufferSize
	}
	return max(size-udpOverhead-len(n.cfg.Label), 256)
}

// encodeState returns every record's counters as one message, for
// push/pull. Records beyond MaxMessageBytes are left out (and sent by
// later syncs or exchanges).
func (n *Node) encodeState() []byte {
	enc := newEncoder(kindState, n.cfg.MaxMessageBytes)
	full := false
	var comps []wireComp
	for i := range n.shards {
		sh := &n.shards[i]
		sh.mu.Lock()
		now := n.clock.Now()
		sh.each(func(r *record) {
			if full {
				return
			}
			n.settle(sh, r)
			if r.expires <= now && !r.dirty {
				return // idle and full everywhere: nothing to tell
			}
			var en wireEntry
			var ok bool
			en, comps, ok = n.entryOf(r, now, sh, comps[:0])
			if ok && !enc.add(&en) {
				full = true
			}
		})
		sh.mu.Unlock()
		if full {
			n.log.Warn("cluster: state larger than MaxMessageBytes; sent in part", "limit", n.cfg.MaxMessageBytes)
			break
		}
	}
	return enc.finish()
}

func (n *Node) mergeLoop() {
	defer n.wg.Done()
	var m message // decoded into again for every message
	for {
		select {
		case <-n.stop:
			return
		case it := <-n.inbox:
			if it.done != nil {
				close(it.done)
				continue
			}
			n.handle(&m, it.b)
			n.recycle(it.b)
		}
	}
}

// handle decodes b into m and merges it; malformed messages are dropped.
// b must not change until handle returns (m's keys alias it).
func (n *Node) handle(m *message, b []byte) {
	err := m.decode(b, n.cfg.MaxMessageBytes)
	defer m.release()
	if err != nil {
		if n.stats.malformed.Add(1) <= 10 {
			n.log.Warn("cluster: dropped gossip message", "err", err, "bytes", len(b))
		}
		return
	}
	n.stats.received.Add(1)
	switch m.kind {
	case kindReset:
		n.resetLocal(m.ns, m.key)
		return
	case kindLeave:
		n.memMu.Lock()
		delete(n.failed, m.ns)
		delete(n.lost, m.ns)
		if _, ok := n.members[m.ns]; !ok {
			// NotifyLeave came first.
			n.memMu.Unlock()
			return
		}
		n.left[m.ns] = time.Now().UnixNano()
		n.memMu.Unlock()
		return
	}
	// The clock is read once per run of entries, not per entry (it costs
	// as much as a merge on some virtual machines): a charge at an
	// instant a few microseconds old is a charge at the state's own
	// instant (algorithms never go back in time), and the record's
	// expiry moves earlier by as much.
	const entriesPerClockRead = 64
	var now int64
	for i := range m.entries {
		if i%entriesPerClockRead == 0 {
			now = n.clock.Now()
		}
		n.merge(&m.entries[i], now)
	}
}

// merge max-merges one key's counters from a peer and charges the
// increase to this node's copy of the key.
func (n *Node) merge(en *wireEntry, now int64) {
	sh, h := n.locate(en.rule.ns, en.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	rec := sh.get(h, en.rule.ns, en.key)
	if rec == nil {
		n.adoptRemote(sh, h, en, now)
		return
	}
	if rec.alg == nil {
		rec.limit = en.rule.limit
		rec.setAlg(n.lookupAlg(en.rule.alg))
	}
	for _, c := range en.comps {
		if c.origin == n.name {
			continue
		}
		cur := rec.comp(c.origin)
		var delta, back uint64
		switch {
		case cur == nil || c.inc > cur.inc:
			delta, back = c.count, c.refunded
		case c.inc == cur.inc:
			if c.count > cur.count {
				delta = c.count - cur.count
			}
			if c.refunded > cur.refunded {
				back = c.refunded - cur.refunded
			}
		}
		if delta == 0 && back == 0 {
			continue
		}
		since := rec.created
		if cur == nil {
			cur = rec.addComp(c.origin)
		} else if cur.at != 0 {
			since = cur.at
		}
		cur.inc, cur.count, cur.refunded = c.inc, c.count, c.refunded
		if delta > 0 {
			cur.at = now
			n.deferCharge(sh, rec, now, n.netAndCap(cur, rec, c.origin, delta, since, now))
		}
		if back > 0 {
			// Give back what the origin refunded (never above the
			// initial state); only increases count, so a replayed
			// message refunds nothing twice.
			n.refund(sh, rec, now, int64(min(back, uint64(ratelimit.MaxCost))))
		}
	}
}

// netAndCap returns how much of an origin's counter increase delta to
// charge: less what was already charged as the estimated use of the
// failed members when the origin was one of them, and no more than it
// could plausibly have admitted since its previous increase.
//
// The credit is shared by all the members that were failed together,
// because their real use is split among them in ways the estimate cannot
// know. It is settled once every one of them is back and has reported, or
// settleTime after the last estimated charge; what is left then (the
// other side used less than its share) is dropped, not carried into later
// consumption.
func (n *Node) netAndCap(cur *comp, rec *record, origin string, delta uint64, since, now int64) int64 {
	amount := int64(min(delta, uint64(ratelimit.MaxCost)))
	owed := cur.owed
	if (owed || rec.credit > 0) && now-rec.creditAt > int64(n.settleTime()) {
		rec.credit, owed = 0, false
		for i := range rec.comps {
			rec.comps[i].owed = false
		}
	}
	if owed {
		used := min(rec.credit, amount)
		rec.credit -= used
		amount -= used
		if n.isMember(origin) {
			cur.owed = false
			if !anyOwed(rec) {
				rec.credit = 0
			}
		}
	}
	capAt := n.plausible(rec.limit, now-since)
	if owed {
		// Unseen for the whole partition: everything it admitted
		// beyond the estimate counts, not only the last fill time.
		capAt = n.plausibleOver(rec.limit, now-since)
	}
	if amount > capAt {
		if n.stats.capped.Add(1) <= 10 {
			n.log.Warn("cluster: implausible counter jump capped", "origin", origin, "key", keyfmt.Quote(rec.id.key), "delta", delta, "cap", capAt)
		}
		amount = capAt
	}
	return amount
}

func anyOwed(rec *record) bool {
	for _, c := range rec.comps {
		if c.owed {
			return true
		}
	}
	return false
}

// settleTime is how long after the last partition charge the credit it
// left is kept for the failed members' real consumption to arrive: one
// push/pull exchange (at least a second) and a few sync intervals.
func (n *Node) settleTime() time.Duration {
	return max(n.cfg.PushPullInterval, time.Second) + 4*n.cfg.SyncInterval
}

// isMember reports whether name is a live member.
func (n *Node) isMember(name string) bool {
	n.memMu.Lock()
	defer n.memMu.Unlock()
	_, ok := n.members[name]
	return ok
}

// plausibleOver is the most one origin can have admitted over elapsed
// nanoseconds, all of which may still matter: the burst plus the refill
// over elapsed and one sync interval.
func (n *Node) plausibleOver(l ratelimit.Limit, elapsed int64) int64 {
	window := max(elapsed, 0) + int64(n.cfg.SyncInterval)
	return min(l.Burst+min(muldiv.Floor(l.Count, window, int64(l.Period)), ratelimit.MaxCount)+1, ratelimit.MaxCost)
}

// plausible is the most one origin can have admitted over elapsed
// nanoseconds: its view of the burst plus the refill, where consumption
// older than one fill time no longer affects a bucket, plus one sync
// interval of slack for delivery delay.
func (n *Node) plausible(l ratelimit.Limit, elapsed int64) int64 {
	window := min(max(elapsed, 0), int64(l.FillTime())) + int64(n.cfg.SyncInterval)
	return min(l.Burst+muldiv.Floor(l.Count, window, int64(l.Period))+1, ratelimit.MaxCost)
}

// adoptRemote creates the record of a key first heard of from a peer: the
// peer's counters become the baseline and the bucket starts at the level
// the peer reported, so consumption is never charged twice.
func (n *Node) adoptRemote(sh *shard, h uint64, en *wireEntry, now int64) {
	rec := newRecord(en.rule.ns, strings.Clone(en.key), h, now) // en.key aliases the message
	rec.limit = en.rule.limit
	rec.comps = make([]comp, 0, len(en.comps))
	alg := n.lookupAlg(en.rule.alg)
	if _, ok := alg.(ratelimit.Charger); !ok {
		alg = nil
	}
	rec.setAlg(alg)
	for _, c := range en.comps {
		if c.origin == n.name {
			continue
		}
		cur := rec.comp(c.origin)
		if cur == nil {
			cur = rec.addComp(c.origin)
		}
		cur.inc, cur.count, cur.refunded, cur.at = c.inc, c.count, c.refunded, now
	}
	switch {
	case rec.alg == nil:
		// Keep the counters at least one fill time, so that a key
		// learned but not yet served is not forgotten and re-learned.
		rec.learned = true
		rec.expires = satAdd(now, int64(rec.limit.FillTime()))
	case en.remaining < rec.limit.Burst:
		n.charge(sh, rec, now, rec.limit.Burst-max(en.remaining, 0))
		// The peers may still be spending their startup allowance on
		// it: hold this node to its share too until their consumption
		// has had time to arrive.
		rec.allowN, rec.youngTick, rec.youngWall = n.live.Load(), n.tickNo.Load(), time.Now().UnixNano()
		if rec.allowN > 1 {
			sh.young = append(sh.young, rec)
		}
	default:
		// Full at the sender: the key is idle, and the first local take
		// gets the startup allowance (see rearm).
	}
	sh.put(rec)
}

// charge records amount units consumed elsewhere on rec at once. The
// caller holds sh.mu.
func (n *Node) charge(sh *shard, rec *record, now, amount int64) {
	n.settle(sh, rec)
	sh.scratch = n.chargeAt(rec, now, amount, sh.scratch[:0])
}

// deferCharge records amount units consumed elsewhere on rec lazily: they
// are added to rec.deferred, which settle charges at the time of the last
// deferred charge before rec's state is next read or written (by a
// decision, a sync, push/pull, a sweep). Most views a node merges are of
// keys it does not decide on before the next merge, so this saves one
// algorithm call per merged entry, or more.
//
// Folding charges into one at the last one's time never admits more than
// charging each when it arrives (a bucket charged later has refilled
// less), and admits less only when the view would have refilled to its
// burst in between, by at most the refill over the span of the folded
// charges; a charge arriving more than deferTicks sync intervals after
// the first one deferred settles those first, so that span, and the
// shortfall, is at most r·deferTicks·S once per view. The caller holds
// sh.mu.
func (n *Node) deferCharge(sh *shard, rec *record, now, amount int64) {
	if amount <= 0 || rec.alg == nil {
		return
	}
	if rec.deferred > 0 && (now-rec.deferredSince > deferTicks*int64(n.cfg.SyncInterval) || rec.deferred > ratelimit.MaxCost-amount) {
		n.settle(sh, rec)
	}
	if rec.deferred == 0 {
		rec.deferredSince, rec.deferredAt = now, now
	}
	rec.deferred += amount
	rec.deferredAt = max(rec.deferredAt, now)
}

// settle charges rec's deferred consumption (see deferCharge). The caller
// holds sh.mu.
func (n *Node) settle(sh *shard, rec *record) {
	if rec.deferred == 0 {
		return
	}
	amount := rec.deferred
	rec.deferred = 0
	sh.scratch = n.chargeAt(rec, rec.deferredAt, amount, sh.scratch[:0])
}

// chargeAt charges amount to rec at time now using dst as scratch, and
// returns the scratch for reuse. Without an algorithm nothing is charged.
func (n *Node) chargeAt(rec *record, now, amount int64, dst []byte) []byte {
	if amount <= 0 || rec.alg == nil {
		return dst
	}
	o, out, err := ratelimit.Evaluate(rec.alg, ratelimit.OpCharge, rec.live(now), now, rec.limit, min(amount, ratelimit.MaxCost), 0, dst)
	if err != nil {
		n.log.Warn("cluster: charge failed", "key", keyfmt.Quote(rec.id.key), "err", err)
		return out[:0]
	}
	if o.Changed {
		rec.setState(out, now, o.TTL)
	}
	return out[:0]
}

// refund gives amount units back to rec (ratelimit.Refunder), never above
// the initial state. The caller holds sh.mu.
func (n *Node) refund(sh *shard, rec *record, now, amount int64) {
	if amount <= 0 || rec.alg == nil {
		return
	}
	n.settle(sh, rec)
	o, out, err := ratelimit.Evaluate(rec.alg, ratelimit.OpRefund, rec.live(now), now, rec.limit, amount, 0, sh.scratch[:0])
	sh.scratch = out[:0]
	if err != nil {
		return // not a Refunder: the origin could not have refunded
	}
	if o.Changed {
		rec.setState(out, now, o.TTL)
	}
}

// reconnectLoop tries every ReconnectInterval to join failed members
// again, so that the two sides of a healed partition merge.
func (n *Node) reconnectLoop() {
	defer n.wg.Done()
	if n.cfg.ReconnectInterval <= 0 {
		return
	}
	t := time.NewTicker(n.cfg.ReconnectInterval)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		now := time.Now().UnixNano()
		var addrs []string
		n.memMu.Lock()
		for name, l := range n.lost {
			if now-l.since > int64(n.cfg.ReconnectTimeout) {
				delete(n.lost, name)
				continue
			}
			addrs = append(addrs, l.addr)
		}
		for name, at := range n.left {
			if now-at > int64(time.Minute) {
				delete(n.left, name)
			}
		}
		n.memMu.Unlock()
		for _, a := range addrs {
			select {
			case <-n.stop:
				return
			default:
			}
			if _, err := n.ml.Join([]string{a}); err != nil {
				n.log.Debug("cluster: reconnect failed", "addr", a, "err", err)
			}
		}
	}
}

const (
	// refusalRecheck is how often a failed member still held in N_ref is
	// dialled again (the first dial is at once), so that one whose host
	// comes back without the process is reclaimed too.
	refusalRecheck = time.Second
	// refusalDialTimeout bounds one such dial: a refusal comes back in a
	// round trip; a dial that times out tells nothing.
	refusalDialTimeout = 500 * time.Millisecond
)

// refusalLoop reclaims the share of a failed member as soon as its gossip
// port refuses a TCP connection. A refusal means its host is up and no
// process listens there: it crashed, and admits nothing, so holding its
// share in N_ref would only under-admit. A partition drops packets instead
// (the dial times out or fails otherwise), and a stopped process's port
// still accepts; both stay held for FailedHold. tr is memberlist's
// transport when the Config set one, nil for its default (TCP).
func (n *Node) refusalLoop(tr memberlist.Transport) {
	defer n.wg.Done()
	if n.cfg.FailedHold <= 0 {
		return
	}
	dial := func(addr string) error {
		var c net.Conn
		var err error
		if tr != nil {
			c, err = tr.DialTimeout(addr, refusalDialTimeout)
		} else {
			c, err = net.DialTimeout("tcp", addr, refusalDialTimeout)
		}
		if err == nil {
			_ = c.Close()
		}
		return err
	}
	t := time.NewTicker(refusalRecheck)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-n.failedNow:
		case <-t.C:
		}
		for name, addr := range n.heldAddrs() {
			select {
			case <-n.stop:
				return
			default:
			}
			if err := dial(addr); !errors.Is(err, syscall.ECONNREFUSED) {
				continue
			}
			n.memMu.Lock()
			_, held := n.failed[name]
			delete(n.failed, name)
			n.memMu.Unlock()
			if held {
				n.stats.reclaimed.Add(1)
				n.log.Info("cluster: failed member's port refuses connections; its share is reclaimed", "member", name, "addr", addr)
			}
		}
	}
}

// heldAddrs returns the address of every failed member held in N_ref.
func (n *Node) heldAddrs() map[string]string {
	n.memMu.Lock()
	defer n.memMu.Unlock()
	out := make(map[string]string, len(n.failed))
	for name := range n.failed {
		if l, ok := n.lost[name]; ok {
			out[name] = l.addr
		}
	}
	return out
}
