package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// The coalescer sends concurrent native calls as one native.lua
// invocation: a batch of independent calls, each all or nothing with its
// own outcome, applied one after another by the script exactly as if sent
// alone. Batching is natural: a call finding fewer than
// maxBatchesInFlight batches of its route under way sends at once,
// carrying every call queued before it; calls arriving while batches are
// in flight queue up for the next one. There is no timer.
//
// A route is one server (a *redis.Client) or one Cluster slot, so a
// batch's keys always share a slot. Ring and unidentified clients are not
// coalesced.
//
// Failure semantics equal the plain path's: a call whose context ends
// before its batch is sent is dropped (ErrUnavailable, nothing sent); one
// whose context ends while its batch is in flight returns
// ErrUnknownOutcome at once; a batch without a reply (a lost reply, a
// timeout) gives every call in it ErrUnknownOutcome, and none is retried.
// A call's deadline given as a value (ApplyBefore, a Limiter's budget) is
// its context's deadline: one timer per route watches every queued and
// sent call's, so no call needs a context and a timer of its own.

const (
	// maxBatchesInFlight is how many batches of one route may be under
	// way at once. Two keep the server busy: one runs while the reply of
	// the other travels and its callers are woken, and every call waits at
	// most for the batch ahead of it and its own. Each more halves the
	// batches, so costs client and server a script invocation, a write
	// and a read more per call, which on a loaded machine (client and
	// server sharing the cores) loses more than the shorter wait gains:
	// docs/redis.md has the measurements.
	maxBatchesInFlight = 2
	// lightLoadCalls is how many calls of one route may be in flight,
	// however many batches carry them, before maxBatchesInFlight holds
	// calls back: a few concurrent callers send at once, as on the plain
	// path, since batches of two or three save little and a call held
	// back waits a round trip.
	lightLoadCalls = 8
	// maxBatchChecks bounds the checks of one batch; calls beyond wait
	// for the next.
	maxBatchChecks = 256
)

// batcher queues the calls of one route.
type batcher struct {
	mu       sync.Mutex
	queue    []*pendingCall
	inFlight int // batches and calls sent alone
	// sentCalls counts the calls of the inFlight batches and calls.
	sentCalls int
	// sent holds the batches in flight, for expire.
	sent [][]*pendingCall
	// expiry fires at armedAt (zero when not armed), at or before the
	// earliest deadline of the calls queued or sent.
	expiry  *time.Timer
	armedAt time.Time
}

// States of a pendingCall.
const (
	callQueued int32 = iota
	callSent
	callDone
	callAbandoned // its caller left: it never reads the call again
	callExpired   // its deadline passed in flight: its caller gets done and leaves
)

// pendingCall is one native call waiting in a batcher. The sender writes
// status, err, now and part, then moves state from callSent to callDone
// and sends on done; a caller whose context ends first moves it to
// callAbandoned and never reads them. A caller that received from done
// owns the call again, decodes its outcomes from part and returns it to
// pendingCalls.
type pendingCall struct {
	ctx      context.Context
	deadline time.Time // zero when none; ctx may end sooner
	keys     []string
	arg      string // the checks' native.lua arguments, one after another
	mask     uint
	state    atomic.Int32
	done     chan struct{}
	status   int64
	err      error
	now      int64  // the server's instant
	part     string // the call's part of the reply (see splitCall)
	scratch  []byte // decodeNative's buffer, kept from call to call
}

// pendingCalls recycles the pendingCalls their callers got back, with
// their done channels (buffered, so the one send of a call never waits).
var pendingCalls = sync.Pool{New: func() any { return &pendingCall{done: make(chan struct{}, 1)} }}

// finish marks p done and tells its caller.
func (p *pendingCall) finish() {
	p.state.Store(callDone)
	p.done <- struct{}{}
}

// release returns p, which its caller received from done, to
// pendingCalls, dropping its references.
func (p *pendingCall) release() {
	*p = pendingCall{done: p.done, scratch: p.scratch[:0]}
	pendingCalls.Put(p)
}

// routes holds the batchers of a store: one for a single server, one per
// slot on a Cluster, created on first use.
type routes struct {
	single batcher
	slots  []atomic.Pointer[batcher]
}

// batcherFor returns the batcher of a call on keys, or nil when the
// store does not coalesce (WithoutCoalescing, a Ring, an unidentified
// client).
func (s *Store) batcherFor(keys []string) *batcher {
	if !s.cfg.coalesce {
		return nil
	}
	switch s.kind {
	case kindSingle:
		return &s.routes.single
	case kindCluster:
		sl := &s.routes.slots[keySlot(keys[0])]
		if b := sl.Load(); b != nil {
			return b
		}
		sl.CompareAndSwap(nil, new(batcher))
		return sl.Load()
	}
	return nil
}

// applyCoalesced runs a native call through b and decodes its outcome
// into out, as applyNative does for a call of its own. arg holds the
// checks' native.lua arguments (a string); deadline, when not zero,
// bounds the call as its context's deadline would. It returns the call's
// status as runNative does.
func (s *Store) applyCoalesced(ctx context.Context, deadline time.Time, b *batcher, checks []ratelimit.Check, keys []string, arg any, mask uint, out []ratelimit.Outcome) (int64, error) {
	p := pendingCalls.Get().(*pendingCall)
	p.ctx, p.deadline, p.keys, p.mask = ctx, deadline, keys, mask
	p.arg, _ = arg.(string)
	s.nativeCalls.Add(1)
	b.mu.Lock()
	b.queue = append(b.queue, p)
	b.watchLocked(deadline)
	batch := b.takeLocked()
	b.mu.Unlock()
	if len(batch) == 1 && batch[0] == p {
		// Alone: send on this goroutine with the caller's own context,
		// as the plain path does.
		sctx, cancel := withDeadline(ctx, deadline)
		next := s.sendBatch(sctx, b, batch)
		cancel()
		if next != nil {
			go s.sendBatchDetached(b, next)
		}
	} else if batch != nil {
		go s.sendBatchDetached(b, batch)
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		switch {
		case p.state.Load() == callQueued && b.dequeue(p):
			return 0, fmt.Errorf("%w: redisstore: the context ended before the call was sent: %w", ratelimit.ErrUnavailable, ctx.Err())
		case p.state.CompareAndSwap(callSent, callAbandoned):
			return 0, fmt.Errorf("%w: redisstore: the context ended while the call's batch was in flight: %w", ratelimit.ErrUnknownOutcome, ctx.Err())
		}
		<-p.done
	}
	if p.state.Load() == callExpired {
		// The batch may still write the call's fields: leave it.
		return 0, fmt.Errorf("%w: redisstore: the deadline passed while the call's batch was in flight: %w", ratelimit.ErrUnknownOutcome, context.DeadlineExceeded)
	}
	status, err := p.status, p.err
	if err == nil {
		err = decodeNative(p.part, status, p.now, checks, out, &p.scratch)
	}
	if err != nil {
		status = 0
	}
	p.release()
	return status, err
}

// startAlone counts a call in flight and reports true when b has nothing
// queued and room for one more batch: a batch of that call alone would
// be sent at once, so the caller sends it directly and then calls
// finishAlone.
func (b *batcher) startAlone() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) > 0 || b.fullLocked() {
		return false
	}
	b.inFlight++
	b.sentCalls++
	return true
}

// fullLocked reports whether a call must wait for a batch to return
// before it is sent.
func (b *batcher) fullLocked() bool {
	return b.inFlight >= maxBatchesInFlight && b.sentCalls >= lightLoadCalls
}

// finishAlone ends a call started by startAlone and sends the calls that
// queued meanwhile.
func (s *Store) finishAlone(b *batcher) {
	b.mu.Lock()
	b.inFlight--
	b.sentCalls--
	next := b.takeLocked()
	b.mu.Unlock()
	if next != nil {
		go s.sendBatchDetached(b, next)
	}
}

// dequeue removes p from the queue if it is still there, under b.mu, and
// reports whether it did.
func (b *batcher) dequeue(p *pendingCall) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p.state.Load() != callQueued {
		return false
	}
	for i, q := range b.queue {
		if q == p {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			p.state.Store(callAbandoned)
			return true
		}
	}
	return false
}

// takeLocked returns the next batch when fewer than maxBatchesInFlight
// are under way, counting it in flight, or nil. Calls whose context has
// ended or whose deadline has passed are dropped from the queue with
// ErrUnavailable: nothing of them was sent.
func (b *batcher) takeLocked() []*pendingCall {
	if len(b.queue) == 0 || b.fullLocked() {
		return nil
	}
	var (
		batch []*pendingCall
		now   time.Time // read once, for the first call with a deadline
	)
	n, checks := 0, 0
	for ; n < len(b.queue); n++ {
		p := b.queue[n]
		if !p.deadline.IsZero() && now.IsZero() {
			now = time.Now()
		}
		if err := p.ended(now); err != nil {
			p.err = fmt.Errorf("%w: redisstore: the context ended before the call was sent: %w", ratelimit.ErrUnavailable, err)
			p.finish()
			continue
		}
		if checks > 0 && checks+len(p.keys) > maxBatchChecks {
			break
		}
		checks += len(p.keys)
		p.state.Store(callSent)
		batch = append(batch, p)
	}
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	if len(batch) > 0 {
		b.inFlight++
		b.sentCalls += len(batch)
		b.sent = append(b.sent, batch)
	}
	return batch
}

// ended returns why p must not wait any longer at now: its context's
// error, or context.DeadlineExceeded when its deadline is not after now.
func (p *pendingCall) ended(now time.Time) error {
	if err := p.ctx.Err(); err != nil {
		return err
	}
	if !p.deadline.IsZero() && !now.Before(p.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// watchLocked makes b's expiry timer fire by deadline (none when zero).
func (b *batcher) watchLocked(deadline time.Time) {
	if deadline.IsZero() || !b.armedAt.IsZero() && !deadline.Before(b.armedAt) {
		return
	}
	b.armedAt = deadline
	if b.expiry == nil {
		b.expiry = time.AfterFunc(time.Until(deadline), func() { b.expire() })
		return
	}
	b.expiry.Reset(time.Until(deadline))
}

// expire ends the calls whose deadline has passed: queued ones with
// ErrUnavailable (never sent), sent ones with ErrUnknownOutcome; their
// batches go on for the others. It then arms the timer for the earliest
// deadline left.
func (b *batcher) expire() {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	var next time.Time
	earliest := func(d time.Time) {
		if !d.IsZero() && (next.IsZero() || d.Before(next)) {
			next = d
		}
	}
	kept := b.queue[:0]
	for _, p := range b.queue {
		if err := p.ended(now); errors.Is(err, context.DeadlineExceeded) && p.ctx.Err() == nil {
			p.err = fmt.Errorf("%w: redisstore: the deadline passed before the call was sent: %w", ratelimit.ErrUnavailable, err)
			p.finish()
			continue
		}
		kept = append(kept, p)
		earliest(p.deadline)
	}
	clear(b.queue[len(kept):])
	b.queue = kept
	for _, batch := range b.sent {
		for _, p := range batch {
			if p.state.Load() != callSent {
				continue
			}
			if !p.deadline.IsZero() && !now.Before(p.deadline) {
				if p.state.CompareAndSwap(callSent, callExpired) {
					p.done <- struct{}{}
				}
				continue
			}
			earliest(p.deadline)
		}
	}
	b.armedAt = next
	if !next.IsZero() {
		b.expiry.Reset(next.Sub(now))
	}
}

// sendBatchDetached sends batch, then the batches queued meanwhile, on
// this goroutine (the batches' own: the next goes out at once, without
// waking another). Each batch has a context of its own, which ends at
// the latest deadline of its calls (none when one has none: the client's
// timeouts bound it): a call whose context ends sooner stops waiting, the
// batch goes on for the others.
func (s *Store) sendBatchDetached(b *batcher, batch []*pendingCall) {
	for batch != nil {
		ctx, cancel := batchContext(batch)
		batch = s.sendBatch(ctx, b, batch)
		cancel()
	}
}

// batchContext returns a context ending at the latest deadline of the
// calls of batch, or none when one has none.
func batchContext(batch []*pendingCall) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, p := range batch {
		d, ok := p.ctx.Deadline()
		if !p.deadline.IsZero() && (!ok || p.deadline.Before(d)) {
			d, ok = p.deadline, true
		}
		if !ok {
			return context.Background(), func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.Background(), latest)
}

// withDeadline returns ctx ending by deadline too, or ctx itself for a
// zero deadline.
func withDeadline(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	if deadline.IsZero() {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, deadline)
}

// sendBatch runs batch as one native.lua call and hands every call its
// outcome. It returns the next batch of b when calls are waiting, counted
// in flight, for the caller to send.
func (s *Store) sendBatch(ctx context.Context, b *batcher, batch []*pendingCall) (next []*pendingCall) {
	s.runBatch(ctx, batch)
	b.mu.Lock()
	b.inFlight--
	b.sentCalls -= len(batch)
	b.sent = slices.DeleteFunc(b.sent, func(sent []*pendingCall) bool { return &sent[0] == &batch[0] })
	next = b.takeLocked()
	b.mu.Unlock()
	for _, p := range batch {
		if p.state.CompareAndSwap(callSent, callDone) {
			p.done <- struct{}{}
		}
	}
	return next
}

// runBatch sends batch and sets each call's status, outcomes or error.
func (s *Store) runBatch(ctx context.Context, batch []*pendingCall) {
	fail := func(err error) {
		for _, p := range batch {
			p.err = err
		}
	}
	var mask uint
	n := 0
	for _, p := range batch {
		mask |= p.mask
		n += len(p.keys)
	}
	s.batches.Add(1)
	s.batchedCalls.Add(int64(len(batch)))
	head, ok := s.headArg(mask)
	if !ok {
		for _, p := range batch {
			p.status = -1
		}
		return
	}
	var (
		keys []string
		args []any
	)
	if len(batch) == 1 {
		// A call alone runs the script's straight path for one call.
		keys, args = batch[0].keys, []any{head, batch[0].arg}
	} else {
		keys = make([]string, 0, n)
		for _, p := range batch {
			keys = append(keys, p.keys...)
		}
		checkArgs, index := batchArgs(batch, n)
		args = []any{head, checkArgs, batchSizes(batch, keys), index}
	}
	reply, err := s.run(ctx, nativeScript, keys, args)
	if err != nil {
		fail(err)
		return
	}
	rep, ok := reply.(string)
	if !ok {
		fail(unexpected(reply))
		return
	}
	now, rest, err := splitNow(rep)
	if err != nil {
		fail(unexpected(reply))
		return
	}
	for _, p := range batch {
		status, part, tail, err := splitCall(rest, len(p.keys))
		if err != nil {
			fail(unexpected(reply))
			return
		}
		p.status, p.now, p.part, rest = status, now, part, tail
	}
	if rest != "" {
		fail(unexpected(reply))
	}
}

// batchArgs returns the distinct native.lua arguments of the n checks of
// batch one after another in one string, and for each check one byte,
// the index of its argument there: the script gets two arguments for the
// checks, not one each, and unpacks each distinct one once. A batch of
// several calls has at most maxBatchChecks checks (takeLocked), so an
// index fits a byte.
func batchArgs(batch []*pendingCall, n int) (checkArgs, index string) {
	const size = 8 * nativeStride
	distinct := make([]string, 0, 4)
	idx := make([]byte, 0, n)
	for _, p := range batch {
		for a := p.arg; a != ""; a = a[size:] {
			arg := a[:size]
			i := slices.Index(distinct, arg)
			if i < 0 {
				i = len(distinct)
				distinct = append(distinct, arg)
			}
			idx = append(idx, byte(i))
		}
	}
	return strings.Join(distinct, ""), string(idx)
}

// batchSizes returns native.lua's per-call sizes of batch, whose calls'
// keys are keys: two big-endian bytes per call, its number of checks,
// plus 32768 for a call of one check whose key no other call names (the
// script reads, decides and writes it at once, without the batch's
// shared state).
func batchSizes(batch []*pendingCall, keys []string) string {
	seen := make(map[string]int, len(keys))
	for _, k := range keys {
		seen[k]++
	}
	b := make([]byte, 0, 2*len(batch))
	for _, p := range batch {
		n := len(p.keys)
		if n == 1 && seen[p.keys[0]] == 1 {
			n |= 1 << 15
		}
		b = append(b, byte(n>>8), byte(n))
	}
	return string(b)
}
