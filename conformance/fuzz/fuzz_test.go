package fuzz

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms/catalog"
	"github.com/sluicehq/sluice/conformance/models"
	"github.com/sluicehq/sluice/conformance/storetest"
	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/algtest"
)

// start is the injected clock's first instant.
var start = time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)

// newMemory returns a memory store on a fresh manual clock.
func newMemory(t *testing.T) (*memstore.Store, *storetest.Clock) {
	clk := storetest.NewClock(start)
	st, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st, clk
}

// neighbours returns keys that differ from key by one byte at either end,
// which a store that trims, escapes or truncates keys could confuse.
func neighbours(key string) []string {
	out := []string{key + "\x00", "\x00" + key, key + "x"}
	if len(key) > 1 {
		out = append(out, key[:len(key)-1], key[1:])
		b := []byte(key)
		b[len(b)-1] ^= 0x20
		out = append(out, string(b))
	}
	return out
}

func FuzzMemoryKeys(f *testing.F) {
	for _, seed := range [][2]string{
		{"", "k"}, {"ns", "user:1"}, {"a", "b:c"}, {"a:b", "c"}, {"", ""},
		{"n", "\x00"}, {"{x}", "{x}"}, {"", "'; DROP TABLE t; --"}, {"", "\xff\xfe"},
		{"", "\r\n"}, {"ns", "]]; redis.call('FLUSHALL') --[["},
	} {
		f.Add(seed[0], seed[1], int64(1))
	}
	f.Fuzz(func(t *testing.T, ns, key string, cost int64) {
		st, _ := newMemory(t)
		ctx := t.Context()
		alg := catalog.All()[0]
		l := ratelimit.Limit{Count: 1, Period: time.Hour, Burst: 8}
		c := ratelimit.Check{Namespace: ns, Key: key, Algorithm: alg, Limit: l, Cost: cost}
		o, err := st.Apply(ctx, c)
		switch {
		case len(key) == 0 || len(key) > ratelimit.MaxKeyLen || len(ns) > ratelimit.MaxKeyLen:
			if !errors.Is(err, ratelimit.ErrInvalidKey) {
				t.Fatalf("namespace of %d bytes, key of %d bytes: %v, want ErrInvalidKey", len(ns), len(key), err)
			}
			return
		case cost < 0 || cost > ratelimit.MaxCost:
			if !errors.Is(err, ratelimit.ErrInvalidCost) {
				t.Fatalf("cost %d: %v, want ErrInvalidCost", cost, err)
			}
			return
		case err != nil:
			t.Fatalf("valid key %q: %v", key, err)
		}
		if o.Allowed != (cost <= l.Burst) {
			t.Fatalf("cost %d on a new key of burst %d: allowed=%t", cost, l.Burst, o.Allowed)
		}
		taken := int64(0)
		if o.Allowed {
			taken = cost
		}
		peek := c
		peek.Cost = 0
		if p, err := st.Apply(ctx, peek); err != nil || p.Remaining != l.Burst-taken {
			t.Fatalf("peek of %q after taking %d: %+v, %v; want %d remaining", key, taken, p, err, l.Burst-taken)
		}
		for _, other := range neighbours(key) {
			if len(other) == 0 || len(other) > ratelimit.MaxKeyLen {
				continue
			}
			q := peek
			q.Key = other
			if p, err := st.Apply(ctx, q); err != nil || p.Remaining != l.Burst {
				t.Fatalf("neighbour %q of %q: %+v, %v; want untouched (%d remaining)", other, key, p, err, l.Burst)
			}
		}
		if len(ns)+1 <= ratelimit.MaxKeyLen {
			q := peek
			q.Namespace = ns + "\x00"
			if p, err := st.Apply(ctx, q); err != nil || p.Remaining != l.Burst {
				t.Fatalf("same key in namespace %q: %+v, %v; want untouched", q.Namespace, p, err)
			}
		}
		if err := st.Reset(ctx, ns, key); err != nil {
			t.Fatalf("Reset: %v", err)
		}
		if p, err := st.Apply(ctx, peek); err != nil || p.Remaining != l.Burst {
			t.Fatalf("peek after Reset: %+v, %v; want %d remaining", p, err, l.Burst)
		}
	})
}

// limits are the limits FuzzDifferential picks from.
var limits = []ratelimit.Limit{
	{Count: 10, Period: time.Second, Burst: 10},
	{Count: 3, Period: time.Minute, Burst: 7},
	{Count: 7, Period: 3 * time.Second, Burst: 1},
	{Count: 1000, Period: time.Millisecond, Burst: 50},
	{Count: 3, Period: 10 * time.Nanosecond, Burst: 2},
}

// gaps are the clock moves FuzzDifferential picks from.
var gaps = []time.Duration{0, 1, 7, time.Millisecond, 99 * time.Millisecond, 100 * time.Millisecond, time.Second, time.Minute, -1, -time.Second, 365 * 24 * time.Hour}

func FuzzDifferential(f *testing.F) {
	f.Add(uint8(0), uint8(0), []byte{1, 0, 1, 0, 1, 0, 10, 3, 1, 6})
	f.Add(uint8(3), uint8(1), []byte{0, 5, 7, 8, 1, 9, 3, 2, 0, 0})
	f.Add(uint8(5), uint8(2), []byte{2, 1, 1, 10, 0, 1, 1, 4})
	f.Fuzz(func(t *testing.T, algIdx, limIdx uint8, ops []byte) {
		algs := catalog.All()
		alg := algs[int(algIdx)%len(algs)]
		m, ok := models.For(alg.Name())
		if !ok {
			t.Fatalf("no model for %q", alg.Name())
		}
		l := limits[int(limIdx)%len(limits)]
		if !algtest.Accepts(alg, l) {
			return // a window algorithm refuses a window that is not whole
		}
		st, clk := newMemory(t)
		key := m.New(l)
		c := ratelimit.Check{Key: "k", Algorithm: alg, Limit: l}
		for i := 0; i+1 < len(ops) && i < 200; i += 2 {
			clk.Advance(gaps[int(ops[i])%len(gaps)])
			c.Cost = int64(ops[i+1]) % (l.Burst + 2)
			o, err := st.Apply(t.Context(), c)
			if err != nil {
				t.Fatalf("op %d: %v", i/2, err)
			}
			if got, want := models.Of(o), key.Decide(clk.Now(), c.Cost); got != want {
				t.Fatalf("op %d (cost %d at +%s) on %s under %s:\nmemory store %+v\nmodel        %+v", i/2, c.Cost, time.Duration(clk.Now()-start.UnixNano()), alg.Name(), l, got, want)
			}
		}
	})
}
