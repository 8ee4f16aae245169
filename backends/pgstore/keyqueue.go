package pgstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// keySlots is how many slots the calls of one Store queue in, chosen by a
// hash of the key. Keys that share a slot share its places, which costs
// time, never exactness.
const keySlots = 1024

// txnsPerKey is how many transactions one Store sends to the server at a
// time for the keys of one slot. Two keep a hot row busy: while one holds
// the row lock, the next already waits for it on the server and takes it
// the moment the first commits. Each more would only wait on the server
// as well, holding a connection and a backend, and the server spends more
// per decision handing the lock along a longer queue (docs/postgres.md
// has the measurements).
const txnsPerKey = 2

// keyQueue bounds the transactions per key that one Store has at the
// server: the callers beyond txnsPerKey wait in Go, without a connection,
// first come first served. The row lock still orders all transactions,
// including those of other processes.
type keyQueue struct {
	seed  maphash.Seed
	slots [keySlots]chan struct{}
}

func newKeyQueue() *keyQueue {
	q := &keyQueue{seed: maphash.MakeSeed()}
	for i := range q.slots {
		q.slots[i] = make(chan struct{}, txnsPerKey)
	}
	return q
}

// slotsOf appends to dst the distinct slots of keys, in ascending order.
func (q *keyQueue) slotsOf(keys []keyState, dst []uint16) []uint16 {
	for i := range keys {
		h := maphash.Bytes(q.seed, keys[i].ns)*31 + maphash.Bytes(q.seed, keys[i].key)
		dst = append(dst, uint16(h%keySlots))
	}
	if len(dst) > 1 {
		slices.Sort(dst)
		dst = slices.Compact(dst)
	}
	return dst
}

// enter takes a place in each of slots (from slotsOf), waiting for the
// calls that hold them until ctx ends or giveUp passes; then it leaves
// what it took and returns an ErrUnavailable error. Slots are taken in
// ascending order, so calls that share several cannot deadlock; nor can
// they with the server's row locks, since a call waits here before its
// transaction begins and leaves after it ends.
func (q *keyQueue) enter(ctx context.Context, slots []uint16, giveUp time.Time) error {
	var timer *time.Timer
	for i, slot := range slots {
		select {
		case q.slots[slot] <- struct{}{}:
			continue
		default:
		}
		if timer == nil {
			timer = time.NewTimer(time.Until(giveUp))
			defer timer.Stop()
		}
		var cause error
		select {
		case q.slots[slot] <- struct{}{}:
			continue
		case <-ctx.Done():
			cause = ctx.Err()
		case <-timer.C:
			cause = context.DeadlineExceeded
		}
		q.leave(slots[:i])
		return fmt.Errorf("pgstore: wait for a call on the same key: %w: %w", ratelimit.ErrUnavailable, cause)
	}
	return nil
}

// leave gives up the places enter took in slots.
func (q *keyQueue) leave(slots []uint16) {
	for _, slot := range slots {
		<-q.slots[slot]
	}
}
