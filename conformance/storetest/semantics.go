package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// oddKeySuffixes are appended to a random key to make keys that stores
// must treat as opaque bytes: separators, hash-tag braces, quotes, NUL,
// line breaks, script and SQL fragments, glob and format characters and
// invalid UTF-8.
var oddKeySuffixes = []string{
	"",
	"\x00",
	"\x00tail",
	"\r\n",
	"\n",
	"\r",
	" ",
	"{tag}",
	"{tag}x",
	"}",
	"{",
	"'",
	"\"",
	"`",
	"\\",
	":",
	"::",
	"*",
	"?[a]",
	"%s%d%%",
	"'; DROP TABLE ratelimit; --",
	"' OR '1'='1",
	"$1",
	"]]; redis.call('FLUSHALL') --[[",
	"\")) return 1 --",
	"\xff\xfe\xfd",
	"\xc0\x80",
	"é",
	"e\u0301",
}

// testIsolation checks that keys differing in any byte, and equal keys in
// different namespaces, never share state.
func (s *suite) testIsolation(t *testing.T) {
	t.Run("Keys", func(t *testing.T) {
		s.forEachAlg(t, func(t *testing.T, alg ratelimit.Algorithm) {
			r := s.rng()
			s.startClock()
			sts := s.stores(t, 2)
			prefix := newKey(t, r, "iso")
			keys := make([]string, 0, len(oddKeySuffixes)+4)
			for _, suf := range oddKeySuffixes {
				keys = append(keys, prefix+suf)
			}
			long := prefix + strings.Repeat("k", ratelimit.MaxKeyLen-len(prefix))
			keys = append(keys, strings.ToUpper(prefix), long, long[:len(long)-1]+"K", long[:len(long)-1])
			s.checkIsolated(t, sts, alg, func(i int) (string, string) { return "iso", keys[i] }, len(keys))
		})
	})
	t.Run("Namespaces", func(t *testing.T) {
		s.forEachAlg(t, func(t *testing.T, alg ratelimit.Algorithm) {
			r := s.rng()
			s.startClock()
			sts := s.stores(t, 2)
			k := newKey(t, r, "ns")
			pairs := [][2]string{
				{"", k}, {"a", k}, {"A", k}, {"a:", k}, {"a", ":" + k}, {"a:b", k}, {"a", "b:" + k},
				{"a\x00", k}, {"a", "\x00" + k}, {"{a}", k}, {"a/b", k}, {"a", "/b" + k},
				{strings.Repeat("n", ratelimit.MaxKeyLen), k},
			}
			s.checkIsolated(t, sts, alg, func(i int) (string, string) { return pairs[i][0], pairs[i][1] }, len(pairs))
		})
	})
}

// checkIsolated takes a different number of units from each of n keys,
// alternating clients, then checks every key still shows exactly its own
// consumption.
func (s *suite) checkIsolated(t *testing.T, sts []ratelimit.Store, alg ratelimit.Algorithm, key func(int) (ns, key string), n int) {
	t.Helper()
	l := s.frozen(int64(n) + 2)
	check := func(i int) ratelimit.Check {
		ns, k := key(i)
		return ratelimit.Check{Namespace: ns, Key: k, Algorithm: alg, Limit: l}
	}
	// Every key is taken from once; an approximate store may hold some
	// takes back for a while, which are then tried again (a denied take
	// changes nothing).
	pending := make([]int, n)
	for i := range pending {
		pending[i] = i
	}
	s.mustSettle(t, func() string {
		var denied []int
		msg := ""
		for _, i := range pending {
			c := check(i)
			c.Cost = int64(i + 1)
			if o := s.mustApply(t, sts[i%2], c); !o.Allowed {
				if msg == "" {
					msg = fmt.Sprintf("first take of %d from %s denied: %+v (another key's consumption leaked in?)", c.Cost, describe(c), o)
				}
				denied = append(denied, i)
			}
		}
		pending = denied
		return msg
	})
	for i := range n {
		c := check(i)
		s.expectSettle(t, func() string {
			if got, want := s.remaining(t, sts[(i+1)%2], c), l.Burst-int64(i+1); got != want {
				return fmt.Sprintf("%s: Remaining = %d, want %d: keys are not isolated (or the key was altered)", describe(c), got, want)
			}
			return ""
		})
	}
}

// testPeek checks that cost 0 reports availability and changes nothing.
func (s *suite) testPeek(t *testing.T) {
	s.forEachAlg(t, func(t *testing.T, alg ratelimit.Algorithm) {
		r := s.rng()
		s.startClock()
		sts := s.stores(t, 2)
		c := ratelimit.Check{Key: newKey(t, r, "peek"), Algorithm: alg, Limit: s.frozen(5)}
		if o := s.mustApply(t, sts[0], c); !o.Allowed || o.Remaining != 5 {
			t.Fatalf("peek at a fresh key: %+v, want allowed with 5 remaining", o)
		}
		c.Cost = 2
		s.take(t, sts[1], c)
		c.Cost = 0
		for i := range 10 {
			s.mustSettle(t, func() string {
				if o := s.mustApply(t, sts[i%2], c); !o.Allowed || o.Remaining != 3 || o.RetryAfter != 0 {
					return fmt.Sprintf("peek %d after taking 2 of 5: %+v, want allowed, 3 remaining, RetryAfter 0", i, o)
				}
				return ""
			})
		}
		c.Cost = 3
		if o := s.take(t, sts[0], c); !o.Allowed {
			t.Fatalf("take of the 3 units left after 10 peeks denied: %+v (peeks consumed)", o)
		}
		c.Cost = 0
		for i := range 3 {
			s.mustSettle(t, func() string {
				if o := s.mustApply(t, sts[i%2], c); o.Allowed || o.Remaining != 0 || o.RetryAfter <= 0 {
					return fmt.Sprintf("peek at an exhausted key: %+v, want denied, 0 remaining, RetryAfter > 0", o)
				}
				return ""
			})
		}
	})
}

// testReset checks that Reset makes a key fully available through any
// client, touches no other namespace and accepts keys without state.
func (s *suite) testReset(t *testing.T) {
	s.forEachAlg(t, func(t *testing.T, alg ratelimit.Algorithm) {
		r := s.rng()
		s.startClock()
		sts := s.stores(t, 2)
		c := ratelimit.Check{Namespace: "reset", Key: newKey(t, r, "reset\x00{x}"), Algorithm: alg, Limit: s.frozen(4), Cost: 4}
		other := c
		other.Namespace = "reset-other"
		s.take(t, sts[0], c)
		s.take(t, sts[0], other)
		s.visible(t, sts[1], c, 0)
		s.visible(t, sts[1], other, 0)
		ctx, cancel := s.opContext(t)
		defer cancel()
		if err := sts[1].Reset(ctx, c.Namespace, c.Key); err != nil {
			t.Fatalf("Reset: %v", err)
		}
		s.expectSettle(t, func() string {
			if got := s.remaining(t, sts[0], c); got != 4 {
				return fmt.Sprintf("Remaining = %d after Reset, want 4 (the burst)", got)
			}
			return ""
		})
		if got := s.remaining(t, sts[1], other); got != 0 {
			t.Errorf("Remaining = %d in another namespace after Reset, want 0: Reset crossed namespaces", got)
		}
		if err := sts[1].Reset(ctx, c.Namespace, newKey(t, r, "never-used")); err != nil {
			t.Errorf("Reset of a key without state: %v, want nil", err)
		}
		if err := sts[1].Reset(ctx, c.Namespace, ""); !errors.Is(err, ratelimit.ErrInvalidKey) {
			t.Errorf("Reset of the empty key: %v, want ErrInvalidKey", err)
		}
		if err := sts[1].Reset(ctx, c.Namespace, strings.Repeat("k", ratelimit.MaxKeyLen+1)); !errors.Is(err, ratelimit.ErrInvalidKey) {
			t.Errorf("Reset of a key of MaxKeyLen+1 bytes: %v, want ErrInvalidKey", err)
		}
	})
}

// testTTL checks that a store keeps state for its whole TTL and that an
// idle key then behaves like a new one. With an injected clock it checks
// the instants TTL-1ns and TTL exactly; without one it checks that state
// survives a short idle time.
func (s *suite) testTTL(t *testing.T) {
	s.forEachAlg(t, func(t *testing.T, alg ratelimit.Algorithm) {
		r := s.rng()
		s.startClock()
		st := s.stores(t, 1)[0]
		if s.h.Clock == nil {
			s.ttlRealTime(t, st, alg, newKey(t, r, "ttl"))
			return
		}
		l := ratelimit.Limit{Count: 10, Period: time.Second, Burst: 5}
		c := ratelimit.Check{Key: newKey(t, r, "ttl"), Algorithm: alg, Limit: l, Cost: 3}
		var ref reference
		want, _ := ref.apply(c, s.now())
		o := s.take(t, st, c)
		if o.TTL <= 0 {
			t.Fatalf("take of 3 of 5: TTL %s, want > 0 (a state that changed must be kept)", o.TTL)
		}
		if o.TTL != want.TTL {
			t.Errorf("TTL = %s, the algorithm says %s", o.TTL, want.TTL)
		}
		for _, at := range []time.Duration{o.TTL - 1, o.TTL, o.TTL + time.Hour} {
			s.h.Clock.Set(base + int64(at))
			for _, cost := range []int64{0, l.Burst} {
				p := c
				p.Cost = cost
				wantAt, _ := ref.peek(p, s.now())
				got := s.mustApply(t, st, p)
				if d := s.compare(got, wantAt); d != "" {
					t.Fatalf("%s after TTL %s, at +%s: %s (state dropped too early or kept wrongly)", describe(p), o.TTL, at, d)
				}
				if cost > 0 && got.Allowed {
					if _, err := ref.apply(p, s.now()); err != nil {
						t.Fatalf("reference model: %v", err)
					}
				}
			}
		}
	})
}

// ttlRealTime checks, without an injected clock, that state survives a
// short idle time: a store that rounds TTLs down to whole seconds or
// drops state early admits here.
//
// The store decides at instants of its own clock that the suite only
// knows to lie between the wall clock read before and after each call
// (widened by serverClockSlack). Window algorithms start a new window at
// every multiple of the 2 s Period, so the first take may land in one
// window and the reference's instant read just before it in the previous
// one: the reference then expected the next window to be fresh while the
// store, rightly, still counted the take. The expected outcome is
// therefore the algorithm's at both ends of both brackets: when all four
// agree (a boundary fell in neither bracket) the store must give it;
// when they differ the store's instant decides, and either is correct.
func (s *suite) ttlRealTime(t *testing.T, st ratelimit.Store, alg ratelimit.Algorithm, key string) {
	l := ratelimit.Limit{Count: 1, Period: 2 * time.Second, Burst: 1}
	c := ratelimit.Check{Key: key, Algorithm: alg, Limit: l, Cost: 1}
	var first bracket
	s.mustSettle(t, func() string { // one try for an exact store
		first.before = time.Now().UnixNano()
		o := s.mustApply(t, st, c)
		first.after = time.Now().UnixNano()
		if !o.Allowed || o.TTL <= 0 {
			return fmt.Sprintf("first take: %+v, want allowed with TTL > 0", o)
		}
		return ""
	})
	// The key's state as the store may have written it: taken at the
	// earliest or at the latest instant the store may have read.
	var refs [2]reference
	for i, at := range first.ends() {
		if o, err := refs[i].apply(c, at); err != nil || !o.Allowed {
			t.Fatalf("reference model: first take at %d: %+v, %v; want allowed", at, o, err)
		}
	}
	time.Sleep(300 * time.Millisecond) // no injected clock: real idle time is the only way
	var second bracket
	second.before = time.Now().UnixNano()
	got := s.mustApply(t, st, c)
	second.after = time.Now().UnixNano()
	var admits, denies bool
	for _, ref := range refs {
		for _, at := range second.ends() {
			want, _ := ref.peek(c, at)
			admits = admits || want.Allowed
			denies = denies || !want.Allowed
		}
	}
	switch {
	case admits && denies:
		t.Logf("a window boundary fell within a call (first %s, second %s): either outcome is correct, the store's allowed=%t", first, second, got.Allowed)
	case got.Allowed && denies:
		t.Errorf("take after 300ms idle (first take %s, second %s): allowed, want denied: state was dropped before its TTL", first, second)
	case !got.Allowed && admits && s.h.Approximate != nil:
		// An approximate store may hold a take back for a while on a
		// key it treats as new; a denied take changes nothing, and later
		// the algorithm admits all the more.
		s.take(t, st, c)
	case !got.Allowed && admits:
		t.Errorf("take after 300ms idle (first take %s, second %s): denied (%+v), want allowed: state was kept past the algorithm's reset", first, second, got)
	}
}

// serverClockSlack is how far the suite assumes a store's clock may be
// from the local wall clock (a server on the same host reads the same
// clock; its microsecond resolution is far within this).
const serverClockSlack = 10 * time.Millisecond

// bracket is what the suite knows of the instant a store decided a call:
// it lies between the wall clock read before and after the call.
type bracket struct{ before, after int64 }

// ends returns the earliest and the latest instant the store may have
// read, widened by serverClockSlack.
func (b bracket) ends() [2]int64 {
	return [2]int64{b.before - int64(serverClockSlack), b.after + int64(serverClockSlack)}
}

// String renders the bracket as a wall-clock time and the call's length.
func (b bracket) String() string {
	return fmt.Sprintf("at %s, %s long", time.Unix(0, b.before).UTC().Format("15:04:05.000000"), time.Duration(b.after-b.before))
}

// testClose checks that Close may be called twice and that every call
// after it fails with ErrClosed, while other clients keep working.
func (s *suite) testClose(t *testing.T) {
	r := s.rng()
	s.startClock()
	alg := s.h.Algorithms[0]
	other := s.stores(t, 1)[0]
	st := s.newStore(t)
	t.Cleanup(func() { _ = st.Close() }) // a third Close, in case the check stops early
	c := ratelimit.Check{Key: newKey(t, r, "close"), Algorithm: alg, Limit: s.frozen(5), Cost: 1}
	s.take(t, st, c)
	if err := st.Close(); err != nil {
		t.Fatalf("first Close: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Errorf("second Close: %v, want nil", err)
	}
	ctx := t.Context()
	if _, err := st.Apply(ctx, c); !errors.Is(err, ratelimit.ErrClosed) {
		t.Errorf("Apply after Close: %v, want ErrClosed", err)
	}
	if _, err := st.ApplyAll(ctx, []ratelimit.Check{c}, make([]ratelimit.Outcome, 1)); !errors.Is(err, ratelimit.ErrClosed) {
		t.Errorf("ApplyAll after Close: %v, want ErrClosed", err)
	}
	if err := st.Reset(ctx, c.Namespace, c.Key); !errors.Is(err, ratelimit.ErrClosed) {
		t.Errorf("Reset after Close: %v, want ErrClosed", err)
	}
	s.expectSettle(t, func() string {
		if got := s.remaining(t, other, c); got != 4 {
			return fmt.Sprintf("another client sees Remaining = %d after the first closed, want 4", got)
		}
		return ""
	})
}

// testContext checks that a cancelled context or a passed deadline fails
// every call with an error matching the context's, or a typed store
// error, and changes nothing; for a ratelimit.DeadlineApplier, that a
// passed deadline value does the same and a live one decides as usual.
func (s *suite) testContext(t *testing.T) {
	r := s.rng()
	s.startClock()
	alg := s.h.Algorithms[0]
	st := s.stores(t, 1)[0]
	c := ratelimit.Check{Key: newKey(t, r, "ctx"), Algorithm: alg, Limit: s.frozen(5), Cost: 1}
	s.take(t, st, c)
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	expired, cancel2 := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"Cancelled", cancelled, context.Canceled},
		{"DeadlinePassed", expired, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok := func(op string, err error) {
				if err == nil {
					t.Errorf("%s with a %s context: no error", op, tc.name)
				} else if !errors.Is(err, tc.want) && !typedStoreErr(err) {
					t.Errorf("%s with a %s context: %v, want an error matching %v or ErrUnavailable", op, tc.name, err, tc.want)
				}
			}
			_, err := st.Apply(tc.ctx, c)
			ok("Apply", err)
			_, err = st.ApplyAll(tc.ctx, []ratelimit.Check{c, c}, make([]ratelimit.Outcome, 2))
			ok("ApplyAll", err)
			ok("Reset", st.Reset(tc.ctx, c.Namespace, c.Key))
			if got := s.remaining(t, st, c); got != 4 {
				t.Errorf("Remaining = %d after calls with a %s context, want 4 (unchanged)", got, tc.name)
			}
		})
	}
	if d := st.(*guarded).deadlineApplier(); d != nil {
		t.Run("DeadlineValue", func(t *testing.T) {
			past := time.Now().Add(-time.Second)
			if _, err := d.ApplyBefore(t.Context(), past, c); err == nil || !errors.Is(err, context.DeadlineExceeded) && !typedStoreErr(err) {
				t.Errorf("ApplyBefore a passed deadline: %v, want an error matching %v or ErrUnavailable", err, context.DeadlineExceeded)
			}
			if _, err := d.ApplyAllBefore(t.Context(), past, []ratelimit.Check{c, c}, make([]ratelimit.Outcome, 2)); err == nil || !errors.Is(err, context.DeadlineExceeded) && !typedStoreErr(err) {
				t.Errorf("ApplyAllBefore a passed deadline: %v, want an error matching %v or ErrUnavailable", err, context.DeadlineExceeded)
			}
			if got := s.remaining(t, st, c); got != 4 {
				t.Fatalf("Remaining = %d after calls before a passed deadline, want 4 (unchanged)", got)
			}
			o, err := d.ApplyBefore(t.Context(), time.Now().Add(s.callTimeout()), c)
			if err != nil || !o.Allowed || o.Remaining != 3 {
				t.Errorf("ApplyBefore a live deadline: %+v, %v, want allowed with 3 remaining", o, err)
			}
			out := make([]ratelimit.Outcome, 2)
			allowed, err := d.ApplyAllBefore(t.Context(), time.Now().Add(s.callTimeout()), []ratelimit.Check{c, c}, out)
			if err != nil || !allowed || out[1].Remaining != 1 {
				t.Errorf("ApplyAllBefore a live deadline: %v %+v, %v, want allowed with 1 remaining", allowed, out, err)
			}
		})
	}
}
