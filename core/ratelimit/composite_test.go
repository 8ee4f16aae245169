package ratelimit_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// counter is an algorithm for these tests: its state is the number of
// units taken, big-endian in the first 8 bytes of a state of size bytes,
// and nothing refills.
type counter struct{ size int }

func (a counter) Name() string { return fmt.Sprint("counter", a.size) }

func (a counter) Decide(state []byte, _ int64, l ratelimit.Limit, cost int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	var used int64
	switch len(state) {
	case 0:
	case a.size:
		used = int64(binary.BigEndian.Uint64(state))
	default:
		return ratelimit.Outcome{}, dst[:0], fmt.Errorf("%w: %d bytes", ratelimit.ErrCorruptState, len(state))
	}
	o := ratelimit.Outcome{Allowed: used+max(cost, 1) <= l.Burst, TTL: time.Hour}
	if cost == 0 || !o.Allowed {
		o.Remaining = max(l.Burst-used, 0)
		return o, append(dst[:0], state...), nil
	}
	used += cost
	o.Changed, o.Remaining = true, l.Burst-used
	dst = binary.BigEndian.AppendUint64(dst[:0], uint64(used))
	return o, append(dst, make([]byte, a.size-8)...), nil
}

func taken(state []byte) int64 {
	if len(state) == 0 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(state))
}

func take(ns, key string, size int, burst, cost int64) ratelimit.Check {
	return ratelimit.Check{Namespace: ns, Key: key, Algorithm: counter{size}, Limit: ratelimit.Every(time.Hour, burst), Cost: cost}
}

func TestDistinctKeys(t *testing.T) {
	checks := []ratelimit.Check{
		take("a:b", "c", 8, 1, 1),
		take("a", "b:c", 8, 1, 1),
		take("a:b", "c", 8, 1, 1),
		take("b", "c", 8, 1, 1),
		take("a", "b:c", 8, 1, 1),
	}
	keyOf := make([]int, len(checks))
	first := ratelimit.DistinctKeys(checks, keyOf, nil)
	if want := []int{0, 1, 0, 2, 1}; !slices.Equal(keyOf, want) {
		t.Errorf("keyOf = %v, want %v", keyOf, want)
	}
	if want := []int{0, 1, 3}; !slices.Equal(first, want) {
		t.Errorf("first = %v, want %v", first, want)
	}
}

func TestEvaluateAllSameKeySeesPreviousEffect(t *testing.T) {
	for _, size := range []int{8, 200} { // within and beyond the room EvaluateAll allocates
		t.Run(fmt.Sprint("state=", size), func(t *testing.T) {
			checks := []ratelimit.Check{
				take("user", "alice", size, 10, 2),
				take("global", "all", size, 10, 1),
				take("user", "alice", size, 10, 3),
				take("user", "alice", size, 10, 0), // a peek: changes nothing
			}
			keyOf := make([]int, len(checks))
			first := ratelimit.DistinctKeys(checks, keyOf, nil)
			stored := binary.BigEndian.AppendUint64(nil, 4)
			stored = append(stored, make([]byte, size-8)...)
			keys := []ratelimit.KeyState{{State: stored}, {}}
			out := make([]ratelimit.Outcome, len(checks))
			allowed, err := ratelimit.EvaluateAll(checks, 0, keyOf, keys, out, nil)
			if err != nil || !allowed || len(first) != 2 {
				t.Fatalf("allowed=%v err=%v keys=%d, want allowed on 2 keys", allowed, err, len(first))
			}
			if got := taken(keys[0].State); got != 9 || !keys[0].Changed || keys[0].Last != 3 {
				t.Errorf("alice: taken %d changed %v last %d, want 9 true 3", got, keys[0].Changed, keys[0].Last)
			}
			if got := taken(keys[1].State); got != 1 || !keys[1].Changed || keys[1].Last != 1 {
				t.Errorf("all: taken %d changed %v last %d, want 1 true 1", got, keys[1].Changed, keys[1].Last)
			}
			if out[2].Remaining != 1 || out[3].Remaining != 1 {
				t.Errorf("remaining %d then %d, want 1 and 1: the third check did not see the first", out[2].Remaining, out[3].Remaining)
			}
			if taken(stored) != 4 {
				t.Errorf("input state now says %d taken: it was written to", taken(stored))
			}
		})
	}
}

func TestEvaluateAllDeniedReportsEveryOutcome(t *testing.T) {
	checks := []ratelimit.Check{
		take("n", "loose", 8, 10, 1),
		take("n", "tight", 8, 1, 2),
		take("n", "other", 8, 1, 1),
	}
	keyOf := make([]int, len(checks))
	first := ratelimit.DistinctKeys(checks, keyOf, nil)
	keys := make([]ratelimit.KeyState, len(first))
	out := make([]ratelimit.Outcome, len(checks))
	allowed, err := ratelimit.EvaluateAll(checks, 0, keyOf, keys, out, nil)
	if err != nil || allowed {
		t.Fatalf("allowed=%v err=%v, want denied by the tight key", allowed, err)
	}
	if !out[0].Allowed || out[1].Allowed || !out[2].Allowed {
		t.Errorf("outcomes %+v, want allowed, denied, allowed", out)
	}
}

func TestEvaluateAllErrorNamesCheckAndKey(t *testing.T) {
	checks := []ratelimit.Check{
		take("n", "fine", 8, 10, 1),
		take("n", "bad\nkey", 8, 10, 1),
	}
	keyOf := make([]int, len(checks))
	ratelimit.DistinctKeys(checks, keyOf, nil)
	keys := []ratelimit.KeyState{{}, {State: []byte("garbage")}}
	_, err := ratelimit.EvaluateAll(checks, 0, keyOf, keys, make([]ratelimit.Outcome, 2), nil)
	if !errors.Is(err, ratelimit.ErrCorruptState) || !strings.Contains(err.Error(), `check 1, key "bad\nkey"`) {
		t.Fatalf("err = %v, want ErrCorruptState naming check 1 and the quoted key", err)
	}
}

func TestEvaluateAllEvalReplacesEvaluate(t *testing.T) {
	checks := []ratelimit.Check{take("n", "a", 8, 10, 1), take("n", "a", 8, 10, 1)}
	keyOf := make([]int, len(checks))
	ratelimit.DistinctKeys(checks, keyOf, nil)
	keys := make([]ratelimit.KeyState, 1)
	var seen []int
	refuseSecond := func(i int, state, dst []byte) (ratelimit.Outcome, []byte, error) {
		seen = append(seen, i)
		if i == 1 {
			return ratelimit.Outcome{}, dst[:0], ratelimit.ErrUnsupported
		}
		c := &checks[i]
		return c.Algorithm.Decide(state, 0, c.Limit, c.Cost, dst)
	}
	_, err := ratelimit.EvaluateAll(checks, 0, keyOf, keys, make([]ratelimit.Outcome, 2), refuseSecond)
	if !errors.Is(err, ratelimit.ErrUnsupported) || !slices.Equal(seen, []int{0, 1}) {
		t.Fatalf("err = %v after checks %v, want ErrUnsupported from eval after checks [0 1]", err, seen)
	}
}

func TestEvaluateAllAllocations(t *testing.T) {
	checks := []ratelimit.Check{take("u", "a", 16, 1<<40, 1), take("g", "b", 16, 1<<40, 1), take("u", "a", 16, 1<<40, 1)}
	keyOf := make([]int, len(checks))
	first := ratelimit.DistinctKeys(checks, keyOf, make([]int, 0, len(checks)))
	keys := make([]ratelimit.KeyState, len(first))
	out := make([]ratelimit.Outcome, len(checks))
	allocs := testing.AllocsPerRun(100, func() {
		if ok, err := ratelimit.EvaluateAll(checks, 0, keyOf, keys, out, nil); !ok || err != nil {
			t.Fatal(ok, err)
		}
	})
	if allocs > 1 {
		t.Errorf("EvaluateAll of 3 small changes allocates %v times, want at most 1 (their room)", allocs)
	}
}
