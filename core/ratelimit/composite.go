package ratelimit

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/keyfmt"
)

// KeyState is the working state of one distinct namespace and key of a
// composite, for EvaluateAll.
type KeyState struct {
	// State is the key's stored state (nil when it has none) before
	// EvaluateAll and the state to store after it.
	State []byte
	// Changed reports whether some check changed State, so that the store
	// must write it.
	Changed bool
	// Last is the index of the last check on the key: the store keeps
	// State for that check's Outcome.TTL (and drops it when the TTL is 0
	// or State is empty).
	Last int
}

// DistinctKeys numbers the distinct namespace and key pairs of checks in
// order of first appearance: it sets keyOf[i] to the number of check i's
// pair and returns first with the index of the first check on each pair
// appended. keyOf must have len(keyOf) >= len(checks).
func DistinctKeys(checks []Check, keyOf, first []int) []int {
	for i := range checks {
		c := &checks[i]
		keyOf[i] = len(first)
		for j, f := range first {
			if checks[f].Key == c.Key && checks[f].Namespace == c.Namespace {
				keyOf[i] = j
				break
			}
		}
		if keyOf[i] == len(first) {
			first = append(first, i)
		}
	}
	return first
}

// stateRoom is how many bytes of new state per check EvaluateAll makes
// room for in one allocation; every in-repo algorithm but the sliding log
// fits, and a larger state is allocated apart.
const stateRoom = 32

// EvaluateAll is ApplyAll's all-or-nothing decision for stores that read
// every key's state, decide in Go, then write. It evaluates validated
// checks in order at now, check i on keys[keyOf[i]] (see DistinctKeys), so
// that checks naming the same namespace and key see the previous one's
// effect; it writes out[i] and reports whether every OpTake and OpReserve
// check was allowed. Only then may the store write the keys whose Changed
// is set; a denied composite writes nothing.
//
// eval, when not nil, evaluates check i on state in place of Evaluate,
// appending the new state to dst[:0] as Evaluate does, for a store with
// rules of its own (say, an algorithm recorded beside the state). New
// states are in memory of their own: input states are never written to.
// An error names the check and its key.
func EvaluateAll(checks []Check, now int64, keyOf []int, keys []KeyState, out []Outcome, eval func(i int, state, dst []byte) (Outcome, []byte, error)) (allowed bool, err error) {
	for j := range keys {
		keys[j].Changed, keys[j].Last = false, -1
	}
	room := make([]byte, 0, stateRoom*len(checks)) // new states, one after another
	allowed = true
	for i := range checks {
		c := &checks[i]
		k := &keys[keyOf[i]]
		dst := room[len(room):]
		var (
			o    Outcome
			next []byte
		)
		if eval != nil {
			o, next, err = eval(i, k.State, dst)
		} else {
			o, next, err = Evaluate(c.Algorithm, c.Op, k.State, now, c.Limit, c.Cost, c.MaxWait, dst)
		}
		if err != nil {
			return false, fmt.Errorf("check %d, key %s: %w", i, keyfmt.Quote(c.Key), err)
		}
		out[i] = o
		if (c.Op == OpTake || c.Op == OpReserve) && !o.Allowed {
			allowed = false
		}
		if o.Changed {
			if len(next) > 0 && len(next) <= cap(dst) && &next[0] == &dst[:1][0] {
				// next is in room: keep it there, out of reach of the
				// next check's dst and of appends to k.State.
				room = room[:len(room)+len(next)]
				next = next[:len(next):len(next)]
			} else {
				// A state that did not fit: later checks allocate too,
				// so nothing can alias what the algorithm returned.
				room = room[:len(room):len(room)]
			}
			k.State, k.Changed = next, true
		}
		k.Last = i
	}
	return allowed, nil
}
