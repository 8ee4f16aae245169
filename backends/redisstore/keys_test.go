package redisstore_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/backends/redisstore"
)

// keyStore returns a store for key-layout tests; it never sends anything.
func keyStore(t testing.TB, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	st, err := redisstore.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestKeyLayout(t *testing.T) {
	st := keyStore(t)
	tests := []struct {
		name              string
		ns1, k1, ns2, k2  string
		sameKey, sameSlot bool
	}{
		{"colon split", "a:b", "c", "a", "b:c", false, false},
		{"same key, two rules", "minute", "user7", "day", "user7", false, true},
		{"explicit tag", "n", "{t1}:ip", "n", "{t1}:user", false, true},
		{"empty tag is no tag", "n", "{}a", "n", "{}b", false, false},
		{"identical", "n", "k", "n", "k", true, true},
		{"namespace bytes move into key", "n\x01", "k", "n", "\x01k", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := st.RedisKey(tt.ns1, tt.k1), st.RedisKey(tt.ns2, tt.k2)
			if (a == b) != tt.sameKey {
				t.Errorf("keys %q and %q: equal %v, want %v", a, b, a == b, tt.sameKey)
			}
			if s := redisstore.KeySlot(a) == redisstore.KeySlot(b); s != tt.sameSlot {
				t.Errorf("keys %q and %q: same slot %v, want %v", a, b, s, tt.sameSlot)
			}
			if !strings.HasPrefix(a, redisstore.DefaultPrefix+"{") {
				t.Errorf("key %q lacks the prefix and tag", a)
			}
		})
	}
}

// FuzzRedisKey checks that the key layout is injective and that a key's
// slot is its tag's, whatever the bytes of namespace and key.
func FuzzRedisKey(f *testing.F) {
	f.Add("a:b", "c", "a", "b:c")
	f.Add("", "{x}", "{", "x}")
	f.Add("n", "\r\n\x00", "n\r", "\n\x00")
	f.Add("\x80", "k", "", "\x01\x80k")
	st := keyStore(f)
	f.Fuzz(func(t *testing.T, ns1, k1, ns2, k2 string) {
		a, b := st.RedisKey(ns1, k1), st.RedisKey(ns2, k2)
		if (a == b) != (ns1 == ns2 && k1 == k2) {
			t.Fatalf("(%q, %q) and (%q, %q) map to %q and %q", ns1, k1, ns2, k2, a, b)
		}
		open := strings.IndexByte(a, '{')
		closing := strings.IndexByte(a, '}')
		if open != len(redisstore.DefaultPrefix) || closing != open+1+redisstore.TagLen {
			t.Fatalf("key %q: tag not at a fixed place", a)
		}
		if redisstore.KeySlot(a) != redisstore.KeySlot(a[open:closing+1]) {
			t.Fatalf("key %q: slot differs from its tag's", a)
		}
	})
}

// TestTagSpread checks that default tags spread keys over every Redis
// Cluster slot and evenly over three masters owning equal slot ranges.
func TestTagSpread(t *testing.T) {
	st := keyStore(t)
	const n = 200_000
	var slots [16384]int
	var masters [3]int
	for i := range n {
		sl := redisstore.KeySlot(st.RedisKey("rule", "user:"+strconv.Itoa(i)))
		slots[sl]++
		masters[int(sl)*3/16384]++
	}
	empty := 0
	for _, c := range slots {
		if c == 0 {
			empty++
		}
	}
	// 200k keys over 16384 slots: about 12 per slot, so a uniform spread
	// leaves a slot empty with probability e^-12.
	if empty > 5 {
		t.Errorf("%d of 16384 slots received no key", empty)
	}
	for m, c := range masters {
		if c < n/3*97/100 || c > n/3*103/100 {
			t.Errorf("master %d of 3 received %d of %d keys, want %d ±3%%", m, c, n, n/3)
		}
	}
}
