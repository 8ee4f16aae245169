package redisstore_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/backends/redisstore"
	"github.com/sluicehq/sluice/core/ratelimit"
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
	tagged := keyStore(t, redisstore.WithHashTag(redisstore.DefaultTag))
	plain := keyStore(t)
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
			a, b := tagged.RedisKey(tt.ns1, tt.k1), tagged.RedisKey(tt.ns2, tt.k2)
			if (a == b) != tt.sameKey {
				t.Errorf("tagged keys %q and %q: equal %v, want %v", a, b, a == b, tt.sameKey)
			}
			if s := redisstore.KeySlot(a) == redisstore.KeySlot(b); s != tt.sameSlot {
				t.Errorf("tagged keys %q and %q: same slot %v, want %v", a, b, s, tt.sameSlot)
			}
			if !strings.HasPrefix(a, redisstore.DefaultPrefix+"{") {
				t.Errorf("tagged key %q lacks the prefix and tag", a)
			}
			pa, pb := plain.RedisKey(tt.ns1, tt.k1), plain.RedisKey(tt.ns2, tt.k2)
			if (pa == pb) != tt.sameKey {
				t.Errorf("untagged keys %q and %q: equal %v, want %v", pa, pb, pa == pb, tt.sameKey)
			}
			// prefix, uvarint length, namespace, key: nothing else.
			if want := redisstore.DefaultPrefix + string(rune(len(tt.ns1))) + tt.ns1 + tt.k1; pa != want {
				t.Errorf("untagged key %q, want %q", pa, want)
			}
		})
	}
}

// TestKeyTagByClient checks which clients get hash-tagged keys: none on a
// single server (a *redis.Client, or WithAutoPipeline on one), always on a
// ClusterClient, a Ring or a client the store cannot identify, and as the
// options say otherwise.
func TestKeyTagByClient(t *testing.T) {
	single := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = single.Close() })
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = cluster.Close() })
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = ring.Close() })
	async, err := single.AsyncAutoPipeline()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		client  redisstore.Client
		opts    []redisstore.Option
		tagged  bool
		refused bool
	}{
		{"single", single, nil, false, false},
		{"single, autopipelined", single, []redisstore.Option{redisstore.WithAutoPipeline(nil)}, false, false},
		{"single, WithHashTag", single, []redisstore.Option{redisstore.WithHashTag(redisstore.DefaultTag)}, true, false},
		{"cluster", cluster, nil, true, false},
		{"cluster, autopipelined", cluster, []redisstore.Option{redisstore.WithAutoPipeline(nil)}, true, false},
		{"cluster, WithoutHashTag", cluster, []redisstore.Option{redisstore.WithoutHashTag()}, false, true},
		{"ring", ring, nil, true, false},
		{"ring, WithoutHashTag", ring, []redisstore.Option{redisstore.WithoutHashTag()}, false, true},
		{"ring, autopipelined", ring, []redisstore.Option{redisstore.WithAutoPipeline(nil)}, false, true},
		{"async autopipeliner", async, nil, true, false},
		{"async autopipeliner, WithoutHashTag", async, []redisstore.Option{redisstore.WithoutHashTag()}, false, false},
		{"both tag options", single, []redisstore.Option{redisstore.WithoutHashTag(), redisstore.WithHashTag(redisstore.DefaultTag)}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := redisstore.New(tt.client, tt.opts...)
			if tt.refused {
				if !errors.Is(err, ratelimit.ErrInvalidOption) {
					t.Fatalf("New = %v, want ErrInvalidOption", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			k := st.RedisKey("n", "user7")
			if got := strings.HasPrefix(k, redisstore.DefaultPrefix+"{"); got != tt.tagged {
				t.Errorf("key %q: tagged %v, want %v", k, got, tt.tagged)
			}
		})
	}
}

// FuzzRedisKey checks that the key layout is injective, tagged or not,
// and that a tagged key's slot is its tag's, whatever the bytes of
// namespace and key.
func FuzzRedisKey(f *testing.F) {
	f.Add("a:b", "c", "a", "b:c")
	f.Add("", "{x}", "{", "x}")
	f.Add("n", "\r\n\x00", "n\r", "\n\x00")
	f.Add("\x80", "k", "", "\x01\x80k")
	tagged := keyStore(f, redisstore.WithHashTag(redisstore.DefaultTag))
	plain := keyStore(f)
	f.Fuzz(func(t *testing.T, ns1, k1, ns2, k2 string) {
		same := ns1 == ns2 && k1 == k2
		for _, st := range []*redisstore.Store{tagged, plain} {
			a, b := st.RedisKey(ns1, k1), st.RedisKey(ns2, k2)
			if (a == b) != same {
				t.Fatalf("(%q, %q) and (%q, %q) map to %q and %q", ns1, k1, ns2, k2, a, b)
			}
		}
		a := tagged.RedisKey(ns1, k1)
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
	st := keyStore(t, redisstore.WithHashTag(redisstore.DefaultTag))
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
