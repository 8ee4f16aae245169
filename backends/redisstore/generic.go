package redisstore

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// applyGeneric is the path for any algorithm: read every distinct key and
// the server's TIME with one script, decide in Go with ratelimit.Evaluate,
// then write with a compare-and-set script that succeeds only if no key
// changed since the read.
//
// Two things keep contention from failing calls. The store's own callers
// on a key take turns (keyTurns): they never conflict with each other, so
// only other processes sharing the key can. And a conflict's CAS reply is a
// fresh snapshot, decided on again at once; every casRetryBurst conflicts
// the caller backs off and then reads again, never writing from a snapshot
// older than its sleep. After cfg.casAttempts conflicts it gives up with
// ErrContention.
//
// A call whose decision writes nothing (a denial, a peek) returns after
// the read: the snapshot was consistent, so the decision is linearizable
// at the moment of the read.
func (s *Store) applyGeneric(ctx context.Context, checks []ratelimit.Check, keys []string, out []ratelimit.Outcome) (bool, error) {
	// Distinct keys, in order of first appearance; keyOf maps a check to
	// one. Redis keys are injective in (namespace, key), so grouping the
	// checks groups the keys.
	keyOf := make([]int, len(checks))
	first := ratelimit.DistinctKeys(checks, keyOf, make([]int, 0, len(checks)))
	uniq := make([]string, len(first))
	for j, i := range first {
		uniq[j] = keys[i]
	}
	release, err := s.turns.take(ctx, uniq)
	if err != nil {
		return false, fmt.Errorf("%w: redisstore: waiting for this store's other calls on the key: %w", ratelimit.ErrUnavailable, err)
	}
	defer release()
	var (
		now    int64
		states []string
	)
	read := func() error {
		reply, err := s.run(ctx, readScript, uniq, nil)
		if err != nil {
			return err
		}
		now, states, err = parseSnapshot(reply, len(uniq))
		if s.cfg.clock != nil {
			now = s.cfg.clock.Now()
		}
		return err
	}
	if err := read(); err != nil {
		return false, err
	}
	work := make([]ratelimit.KeyState, len(uniq))
	args := make([]any, 3*len(uniq))
	for attempt := 1; ; attempt++ {
		for j := range work {
			work[j].State = []byte(states[j])
		}
		allowed, err := ratelimit.EvaluateAll(checks, now, keyOf, work, out, nil)
		if err != nil || !allowed {
			return false, err
		}
		write := false
		for j := range uniq {
			k := &work[j]
			write = write || k.Changed
			args[3*j] = states[j]
			args[3*j+1] = k.State
			args[3*j+2] = s.expiry(k.Changed, out[k.Last].TTL, k.State)
		}
		if !write {
			return true, nil
		}
		reply, err := s.run(ctx, casScript, uniq, args)
		if err != nil {
			return false, err
		}
		done, n, st, err := parseCAS(reply, len(uniq))
		if err != nil {
			return false, err
		}
		if done {
			return true, nil
		}
		if attempt >= s.cfg.casAttempts {
			return false, fmt.Errorf("%w after %d attempts on %d keys", ErrContention, attempt, len(uniq))
		}
		now, states = n, st
		if s.cfg.clock != nil {
			now = s.cfg.clock.Now()
		}
		if attempt%casRetryBurst != 0 {
			continue
		}
		// The snapshot ages while we sleep: read again after.
		if err := backoff(ctx, attempt/casRetryBurst); err != nil {
			return false, fmt.Errorf("%w: redisstore: %w", ratelimit.ErrUnavailable, err)
		}
		if err := read(); err != nil {
			return false, err
		}
	}
}

// casRetryBurst is how many conflicts in a row the generic path answers
// at once from the fresh snapshot of the CAS reply before it backs off.
const casRetryBurst = 8

// keyTurns makes a store's generic-path calls on one Redis key take turns,
// so they do not fail each other's compare-and-set. Keys map to a fixed
// set of turns by hash: two keys may share one, which only costs
// parallelism. A call on several keys takes their turns in index order, so
// two calls never wait for each other in a cycle.
type keyTurns struct {
	once  sync.Once
	turns []chan struct{}
}

// numKeyTurns is the number of turns; a power of two.
const numKeyTurns = 1024

// take waits for the turns of keys, or for the end of ctx, and returns
// the function giving them back.
func (kt *keyTurns) take(ctx context.Context, keys []string) (release func(), err error) {
	kt.once.Do(func() {
		kt.turns = make([]chan struct{}, numKeyTurns)
		for i := range kt.turns {
			kt.turns[i] = make(chan struct{}, 1)
		}
	})
	idx := make([]int, 0, len(keys))
	for _, k := range keys {
		h := fnv.New64a()
		_, _ = h.Write([]byte(k))
		idx = append(idx, int(h.Sum64()&(numKeyTurns-1)))
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	release = func() {
		for _, i := range idx {
			<-kt.turns[i]
		}
	}
	for n, i := range idx {
		select {
		case kt.turns[i] <- struct{}{}:
		case <-ctx.Done():
			for _, j := range idx[:n] {
				<-kt.turns[j]
			}
			return nil, ctx.Err()
		}
	}
	return release, nil
}

// expiry returns the CAS script's expiry argument for a distinct key: ""
// when no check changed it, "0" to delete it (TTL 0 or empty state), else
// the TTL of the last check on it as PEXPIRE milliseconds.
func (s *Store) expiry(changed bool, ttl time.Duration, next []byte) string {
	switch {
	case !changed:
		return ""
	case ttl <= 0 || len(next) == 0:
		return "0"
	}
	return strconv.FormatInt(s.pexpire(ttl), 10)
}

// pexpire converts a TTL to the milliseconds of PEXPIRE: rounded up, plus
// the configured margin, saturating far below Redis's limit.
func (s *Store) pexpire(ttl time.Duration) int64 {
	const maxMS = 1 << 50
	ms := int64(ttl / time.Millisecond)
	if ttl%time.Millisecond != 0 {
		ms++
	}
	ms += int64(s.cfg.ttlMargin / time.Millisecond)
	return min(ms, maxMS)
}

// backoff waits a random time below a cap that doubles with each attempt
// from 50µs up to 5ms, so contending callers spread out.
func backoff(ctx context.Context, attempt int) error {
	limit := min(50*time.Microsecond<<min(attempt, 10), 5*time.Millisecond)
	t := time.NewTimer(rand.N(limit) + 1)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// parseSnapshot decodes read.lua's reply: TIME then n states.
func parseSnapshot(reply any, n int) (int64, []string, error) {
	arr, ok := reply.([]any)
	if !ok || len(arr) != n+2 {
		return 0, nil, unexpected(reply)
	}
	now, err := parseTime(arr[0], arr[1])
	if err != nil {
		return 0, nil, err
	}
	states := make([]string, n)
	for i := range n {
		switch v := arr[i+2].(type) {
		case nil:
		case string:
			states[i] = v
		default:
			return 0, nil, unexpected(reply)
		}
	}
	return now, states, nil
}

// parseCAS decodes cas.lua's reply.
func parseCAS(reply any, n int) (done bool, now int64, states []string, err error) {
	arr, ok := reply.([]any)
	if !ok || len(arr) == 0 {
		return false, 0, nil, unexpected(reply)
	}
	if v, ok := arr[0].(int64); ok && v == 1 && len(arr) == 1 {
		return true, 0, nil, nil
	}
	now, states, err = parseSnapshot(arr[1:], n)
	return false, now, states, err
}

// parseTime converts TIME's seconds and microseconds to Unix nanoseconds.
func parseTime(secV, usecV any) (int64, error) {
	sec, err1 := toInt(secV)
	usec, err2 := toInt(usecV)
	if err1 != nil || err2 != nil || sec < 0 || usec < 0 || usec >= 1e6 || sec > 9e9 {
		return 0, fmt.Errorf("%w: redisstore: bad TIME %v %v", ratelimit.ErrUnknownOutcome, secV, usecV)
	}
	return sec*1e9 + usec*1e3, nil
}

func toInt(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case string:
		return strconv.ParseInt(x, 10, 64)
	}
	return 0, fmt.Errorf("not an integer: %T", v)
}

// unexpected reports a reply of the wrong shape. The script ran, so what
// it did is unknown.
func unexpected(reply any) error {
	return fmt.Errorf("%w: redisstore: unexpected reply %T", ratelimit.ErrUnknownOutcome, reply)
}
