package pgstore

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

func TestKeyQueueSlots(t *testing.T) {
	q := newKeyQueue()
	k := func(ns, key string) keyState { return keyState{ns: []byte(ns), key: []byte(key)} }
	one := q.slotsOf([]keyState{k("ns", "a")}, nil)
	if len(one) != 1 {
		t.Fatalf("slotsOf(one key) = %v, want one slot", one)
	}
	if again := q.slotsOf([]keyState{k("ns", "a")}, nil); !slices.Equal(again, one) {
		t.Fatalf("the same key got slots %v and %v", one, again)
	}
	keys := []keyState{k("ns", "a")}
	for i := range 64 {
		keys = append(keys, k("ns", string(rune('b'+i))), k("ns", "a"))
	}
	got := q.slotsOf(keys, nil)
	if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
		t.Fatalf("slotsOf = %v, want ascending and distinct", got)
	}
	if !slices.Contains(got, one[0]) {
		t.Fatalf("slotsOf(a, …) = %v lacks a's slot %d", got, one[0])
	}
}

// TestKeyQueueGivesUp: a call finding a slot full waits until its context
// ends or its give-up time passes, then fails with ErrUnavailable and
// leaves the slots it had taken.
func TestKeyQueueGivesUp(t *testing.T) {
	q := newKeyQueue()
	far := time.Now().Add(time.Minute)
	for range txnsPerKey {
		if err := q.enter(t.Context(), []uint16{7}, far); err != nil {
			t.Fatal(err)
		}
	}

	start := time.Now()
	err := q.enter(t.Context(), []uint16{3, 7}, time.Now().Add(20*time.Millisecond))
	if !errors.Is(err, ratelimit.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("enter past its give-up time = %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("enter gave up after %s, before its give-up time", d)
	}
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(10*time.Millisecond, cancel)
	if err := q.enter(ctx, []uint16{3, 7}, far); !errors.Is(err, ratelimit.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("enter with its context canceled = %v, want ErrUnavailable and Canceled", err)
	}
	for range txnsPerKey { // slot 3 was left by both failed calls
		select {
		case q.slots[3] <- struct{}{}:
		default:
			t.Fatal("a failed enter kept its place in slot 3")
		}
	}

	q.leave([]uint16{7})
	if err := q.enter(t.Context(), []uint16{7}, time.Now().Add(time.Second)); err != nil {
		t.Fatalf("enter after a leave = %v", err)
	}
}

// TestHotKeyCallsQueueInProcessConcurrentSafe: 16 callers on one key of
// one Store never have more than txnsPerKey transactions (connections) at
// the server, and admission stays exact.
func TestHotKeyCallsQueueInProcessConcurrentSafe(t *testing.T) {
	s, pool := newStore(t)
	key := randomName("hot-")
	const callers, calls, burst = 16, 10, 100
	var most atomic.Int32
	s.afterLock = func(uint32) {
		n := pool.Stat().AcquiredConns()
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
	}
	allowed := admitConcurrently(t, callers, calls, func(ctx context.Context, _ int) (bool, error) {
		o, err := s.Apply(ctx, take(key, burst, 1))
		return o.Allowed, err
	})
	if allowed != burst {
		t.Fatalf("%d of %d calls allowed, want exactly %d", allowed, callers*calls, burst)
	}
	if m := most.Load(); m > txnsPerKey {
		t.Fatalf("%d connections in use on one key, want at most %d", m, txnsPerKey)
	}
}

// TestMaxLockWaitCoversKeyQueue: with WithMaxLockWait, a call queued in
// the process behind calls that wait for a locked row gives up when the
// cap has passed, its wait in the queue included, long before its
// deadline; a queued call that got the cap anew at the server would wait
// about twice as long. The calls at the server may themselves wait up to
// twice the cap: PostgreSQL times each lock wait on its own, and the
// second waits for the row (behind the first), then for the holder's
// transaction.
func TestMaxLockWaitCoversKeyQueue(t *testing.T) {
	const maxWait = time.Second
	s, pool := newStore(t, WithMaxLockWait(maxWait))
	key := randomName("capped-")
	if _, err := s.Apply(t.Context(), take(key, 5, 1)); err != nil {
		t.Fatal(err)
	}
	release := holdLock(t, pool, s, key)
	defer release()
	type result struct {
		err     error
		elapsed time.Duration
	}
	call := func(results chan<- result) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		start := time.Now()
		_, err := s.Apply(ctx, take(key, 5, 1))
		results <- result{err, time.Since(start)}
	}
	atServer, queued := make(chan result, txnsPerKey), make(chan result, 2)
	for range txnsPerKey {
		go call(atServer)
	}
	waitFor(t, 5*time.Second, "the first calls wait for the row lock", func() bool {
		var n int
		err := pool.QueryRow(t.Context(), "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0",
			s.cfg.table).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n == txnsPerKey
	})
	for range cap(queued) {
		go call(queued)
	}
	for _, c := range []struct {
		results chan result
		bound   time.Duration
	}{{queued, maxWait * 3 / 2}, {atServer, maxWait * 5 / 2}} {
		for range cap(c.results) {
			r := <-c.results
			if !errors.Is(r.err, ratelimit.ErrUnavailable) {
				t.Errorf("Apply behind a lock with a %s cap = %v, want ErrUnavailable", maxWait, r.err)
			}
			if r.elapsed > c.bound {
				t.Errorf("Apply gave up after %s, want within %s (cap %s, deadline 10s)", r.elapsed, c.bound, maxWait)
			}
		}
	}
	release()
	if got := remaining(t, s, key, 5); got != 4 {
		t.Fatalf("remaining %d, want 4 (nothing spent)", got)
	}
}
