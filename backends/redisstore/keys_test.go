package redisstore_test

import (
	"errors"
	"fmt"
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

// TestKeyLayout pins the documented layout (doc.go, docs/redis.md) on
// literal examples: prefix, the tag in braces on tagged stores, the
// escaped rule name, a colon, the key verbatim.
func TestKeyLayout(t *testing.T) {
	tagged := keyStore(t, redisstore.WithHashTag(redisstore.DefaultTag))
	plain := keyStore(t)
	app := keyStore(t, redisstore.WithPrefix("app:"))
	bare := keyStore(t, redisstore.WithPrefix(""))
	tests := []struct {
		name, ns, key, plain, tagged string
	}{
		{"rule and key", "minute", "user7", "rl:minute:user7", "rl:{pFg}:minute:user7"},
		{"package doc example", "login", "user:42", "rl:login:user:42", "rl:{mYg}:login:user:42"},
		{"same key, other rule, same tag", "day", "user7", "rl:day:user7", "rl:{pFg}:day:user7"},
		{"tag from braces in the key", "api", "{tenant1}:ip:10.0.0.1", "rl:api:{tenant1}:ip:10.0.0.1", "rl:{xF9}:api:{tenant1}:ip:10.0.0.1"},
		{"colon in the rule is escaped", "a:b", "c", "rl:a%3Ab:c", "rl:{dwk}:a%3Ab:c"},
		{"colon in the key is verbatim", "a", "b:c", "rl:a:b:c", "rl:{PtE}:a:b:c"},
		{"escaped rule bytes", "{x} 100%\n", "k", "rl:%7Bx%7D%20100%25%0A:k", "rl:{K6Q}:%7Bx%7D%20100%25%0A:k"},
		{"non-ASCII rule", "caf\u00e9", "k", "rl:caf%C3%A9:k", "rl:{K6Q}:caf%C3%A9:k"},
		{"empty rule", "", "k", "rl::k", "rl:{K6Q}::k"},
		{"key bytes verbatim", "n", "\x00\r\n{}%", "rl:n:\x00\r\n{}%", "rl:{f4e}:n:\x00\r\n{}%"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := plain.RedisKey(tt.ns, tt.key); got != tt.plain {
				t.Errorf("untagged key %q, want %q", got, tt.plain)
			}
			if got := tagged.RedisKey(tt.ns, tt.key); got != tt.tagged {
				t.Errorf("tagged key %q, want %q", got, tt.tagged)
			}
			rest := strings.TrimPrefix(tt.plain, redisstore.DefaultPrefix)
			if got := app.RedisKey(tt.ns, tt.key); got != "app:"+rest {
				t.Errorf("key with prefix app: is %q, want %q", got, "app:"+rest)
			}
			if got := bare.RedisKey(tt.ns, tt.key); got != rest {
				t.Errorf("key with an empty prefix is %q, want %q", got, rest)
			}
		})
	}
}

// TestKeyInjective checks that tricky (namespace, key) pairs, which a
// naive "rule:key" join or a sloppy escape would merge, map to distinct
// keys on both layouts.
func TestKeyInjective(t *testing.T) {
	pairs := [][2]string{
		{"a:b", "c"}, {"a", "b:c"}, {"a:", "b"}, {"a", ":b"},
		{"", ":k"}, {":", "k"}, {"", "k"}, {"k", ":"},
		{"a%3Ab", "c"}, {"a%", "3Ab:c"},
		{"{t}", "k"}, {"%7Bt%7D", "k"}, {"x y", "k"}, {"x%20y", "k"},
		{"n\x01", "k"}, {"n", "\x01k"}, {"n%01", "k"},
		{"\xff", "k"}, {"%FF", "k"}, {"%ff", "k"},
		{"minute", "user7"}, {"minute", "user7 "}, {"minute:user7", "x"},
	}
	for _, st := range []*redisstore.Store{keyStore(t), keyStore(t, redisstore.WithHashTag(redisstore.DefaultTag))} {
		seen := make(map[string][2]string)
		for _, p := range pairs {
			k := st.RedisKey(p[0], p[1])
			if q, dup := seen[k]; dup {
				t.Errorf("%q and %q both map to %q", q, p, k)
			}
			seen[k] = p
		}
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

// FuzzRedisKey checks, whatever the bytes of namespace and key, that a
// key parses back into them by the documented layout (so the layout is
// injective), that two pairs share a key only when equal, that the rule
// part is printable ASCII without separator or brace, and that a tagged
// key starts with its tag and has its tag's slot.
func FuzzRedisKey(f *testing.F) {
	f.Add("a:b", "c", "a", "b:c")
	f.Add("", "{x}", "{", "x}")
	f.Add("n", "\r\n\x00", "n\r", "\n\x00")
	f.Add("\x80", "k", "", "\x01\x80k")
	f.Add("a%3A", "b", "a:", "b")
	tagged := keyStore(f, redisstore.WithHashTag(redisstore.DefaultTag))
	plain := keyStore(f)
	f.Fuzz(func(t *testing.T, ns1, k1, ns2, k2 string) {
		for _, st := range []struct {
			s      *redisstore.Store
			tagged bool
		}{{tagged, true}, {plain, false}} {
			a, b := st.s.RedisKey(ns1, k1), st.s.RedisKey(ns2, k2)
			if (a == b) != (ns1 == ns2 && k1 == k2) {
				t.Fatalf("(%q, %q) and (%q, %q) map to %q and %q", ns1, k1, ns2, k2, a, b)
			}
			tag, rule, key, err := parseKey(a, redisstore.DefaultPrefix, st.tagged)
			if err != nil {
				t.Fatalf("key %q of (%q, %q): %v", a, ns1, k1, err)
			}
			if ns, err := unescapeRule(rule); err != nil || ns != ns1 || key != k1 {
				t.Fatalf("key %q parses into (%q, %q), %v; want (%q, %q)", a, ns, key, err, ns1, k1)
			}
			if st.tagged && redisstore.KeySlot(a) != redisstore.KeySlot(tag) {
				t.Fatalf("key %q: slot %d, its tag %q has slot %d", a, redisstore.KeySlot(a), tag, redisstore.KeySlot(tag))
			}
		}
	})
}

// parseKey splits a Redis key by the documented layout: prefix, on a
// tagged store "{" tag "}:", then the escaped rule up to the first ':',
// then the key.
func parseKey(rk, prefix string, tagged bool) (tag, rule, key string, err error) {
	rest, ok := strings.CutPrefix(rk, prefix)
	if !ok {
		return "", "", "", errors.New("no prefix")
	}
	if tagged {
		n := redisstore.TagLen
		if len(rest) < n+3 || rest[0] != '{' || rest[n+1:n+3] != "}:" || strings.ContainsAny(rest[1:n+1], "{}:") {
			return "", "", "", errors.New("no tag in braces after the prefix")
		}
		tag, rest = rest[1:n+1], rest[n+3:]
	}
	rule, key, ok = strings.Cut(rest, ":")
	if !ok {
		return "", "", "", errors.New("no colon after the rule")
	}
	return tag, rule, key, nil
}

// unescapeRule decodes the rule part of a key: '%' and two upper-case hex
// digits stand for a byte; every other byte is printable ASCII other than
// '%', ':', '{' and '}', and stands for itself.
func unescapeRule(rule string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(rule); i++ {
		c := rule[i]
		switch {
		case c == '%':
			if i+3 > len(rule) {
				return "", fmt.Errorf("truncated escape at %d", i)
			}
			v, err := strconv.ParseUint(rule[i+1:i+3], 16, 8)
			if err != nil || strings.ToUpper(rule[i+1:i+3]) != rule[i+1:i+3] {
				return "", fmt.Errorf("bad escape %q", rule[i:i+3])
			}
			b.WriteByte(byte(v))
			i += 2
		case c <= ' ' || c >= 0x7f || c == ':' || c == '{' || c == '}':
			return "", fmt.Errorf("byte %#x verbatim in the rule", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
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
