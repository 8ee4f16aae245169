package cluster

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// sampleMessage returns a valid sync message with two rules, three
// origins and three keys.
func sampleMessage() []byte {
	enc := newEncoder(kindSync, 1<<20)
	lim := ratelimit.Limit{Count: 100, Period: time.Second, Burst: 100}
	entries := []wireEntry{
		{rule: wireRule{ns: "api", alg: "tokenbucket", limit: lim}, key: "user:1", remaining: 40,
			comps: []wireComp{{origin: "a", inc: 7, count: 60}, {origin: "b", inc: 9, count: 3}}},
		{rule: wireRule{ns: "api", alg: "tokenbucket", limit: lim}, key: "user:2", remaining: 100,
			comps: []wireComp{{origin: "c", inc: 1 << 62, count: 0}}},
		{rule: wireRule{ns: "", alg: "gcra", limit: lim.WithBurst(5)}, key: "\x00\r\n{}'", remaining: 0,
			comps: []wireComp{{origin: "a", inc: 8, count: maxCounter}}},
	}
	for i := range entries {
		if !enc.add(&entries[i]) {
			panic("sample does not fit")
		}
	}
	return enc.finish()
}

func TestWireRoundTrip(t *testing.T) {
	b := sampleMessage()
	m, err := decodeMessage(b, 1<<20)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if len(m.entries) != 3 || m.entries[0].key != "user:1" || m.entries[2].comps[0].count != maxCounter {
		t.Fatalf("decoded %+v", m)
	}
	for _, tc := range []struct {
		name string
		msg  []byte
		ns   string
		key  string
		kind byte
	}{
		{"reset", encodeReset("ns", "k"), "ns", "k", kindReset},
		{"leave", encodeLeave("node-1"), "node-1", "", kindLeave},
	} {
		m, err := decodeMessage(tc.msg, 1<<20)
		if err != nil || m.kind != tc.kind || m.ns != tc.ns || m.key != tc.key {
			t.Errorf("%s: got %+v, %v", tc.name, m, err)
		}
	}
}

func TestWireRejectsBadInput(t *testing.T) {
	good := sampleMessage()
	// Every strict prefix is truncated and must be refused.
	for i := range len(good) {
		if _, err := decodeMessage(good[:i], 1<<20); !errors.Is(err, errBadMessage) {
			t.Fatalf("prefix of %d bytes: err %v, want errBadMessage", i, err)
		}
	}
	for _, tc := range []struct {
		name string
		msg  []byte
	}{
		{"empty", nil},
		{"version 2", append([]byte{2}, good[1:]...)},
		{"unknown kind", []byte{wireVersion, 9}},
		{"trailing byte", append(append([]byte(nil), good...), 0)},
		{"oversized", make([]byte, 2<<20)},
		{"huge origin count", []byte{wireVersion, kindSync, 0xff, 0xff, 0xff, 0xff, 0x0f}},
		{"invalid limit", []byte{wireVersion, kindSync, 0, 1, 0, 1, 'x', 0, 1, 1, 0}},
		{"entry without rules", []byte{wireVersion, kindSync, 0, 0, 1, 0, 1, 'k', 0, 0}},
		{"empty key", encodeReset("ns", "")},
	} {
		if _, err := decodeMessage(tc.msg, 1<<20); !errors.Is(err, errBadMessage) {
			t.Errorf("%s: err %v, want errBadMessage", tc.name, err)
		}
	}
}

// FuzzDecodeSync checks that no input makes the decoder panic or allocate
// without bound, and that whatever it accepts re-encodes to the same
// entries.
func FuzzDecodeSync(f *testing.F) {
	f.Add(sampleMessage())
	f.Add(encodeReset("ns", "key"))
	f.Add(encodeLeave("n1"))
	f.Add([]byte{wireVersion, kindState, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMessage(b, 1<<20)
		if err != nil {
			if !errors.Is(err, errBadMessage) {
				t.Fatalf("error %v does not wrap errBadMessage", err)
			}
			return
		}
		if m.kind != kindSync && m.kind != kindState {
			return
		}
		enc := newEncoder(m.kind, 1<<30)
		for i := range m.entries {
			enc.add(&m.entries[i])
		}
		again, err := decodeMessage(enc.finish(), 1<<30)
		if err != nil {
			t.Fatalf("re-encoded message does not decode: %v", err)
		}
		if len(m.entries) == 0 && len(again.entries) == 0 {
			return
		}
		if !reflect.DeepEqual(again.entries, m.entries) {
			t.Fatalf("round trip changed entries:\n%+v\n%+v", m.entries, again.entries)
		}
	})
}

func TestGarbageMessagesDropped(t *testing.T) {
	nodes := startCluster(t, 2, nil)
	lim := ratelimit.Limit{Count: 1, Period: time.Hour, Burst: 10}
	c := ratelimit.Check{Namespace: "g", Key: newKey(t), Algorithm: tokenbucket.New(), Limit: lim, Cost: 1}
	take(t, nodes[1], c)
	before := nodes[1].Stats().Malformed
	good := sampleMessage()
	bad := [][]byte{good[:len(good)/2], {0xff, 0xff}, make([]byte, nodes[1].cfg.MaxMessageBytes+1)}
	for _, m := range bad {
		(*delegate)(nodes[1]).NotifyMsg(m)
	}
	waitFor(t, 2*time.Second, func() string {
		if got := nodes[1].Stats().Malformed - before; got != uint64(len(bad)) {
			return "malformed count " + itoa(int64(got))
		}
		return ""
	})
	peek := c
	peek.Cost = 0
	if o := take(t, nodes[1], peek); o.Remaining != 9 {
		t.Fatalf("remaining %d after garbage, want 9 (state unchanged)", o.Remaining)
	}
}

// fakeClock is a ratelimit.Clock moved by the test.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() int64 { return c.ns.Load() }

func TestImplausibleJumpCapped(t *testing.T) {
	clk := &fakeClock{}
	clk.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	nodes := startCluster(t, 1, func(_ int, c *Config) { c.Clock = clk })
	n := nodes[0]
	lim := ratelimit.Limit{Count: 100, Period: time.Second, Burst: 100}
	c := ratelimit.Check{Namespace: "j", Key: newKey(t), Algorithm: tokenbucket.New(), Limit: lim, Cost: 1}
	take(t, n, c)
	enc := newEncoder(kindSync, 1<<20)
	enc.add(&wireEntry{rule: wireRule{ns: "j", alg: "tokenbucket", limit: lim}, key: c.Key,
		comps: []wireComp{{origin: "evil", inc: 1, count: 1 << 40}}})
	n.handle(&message{}, enc.finish())
	if got := n.Stats().Capped; got != 1 {
		t.Fatalf("capped %d, want 1", got)
	}
	peek := c
	peek.Cost = 0
	if o := take(t, n, peek); o.Allowed {
		t.Fatalf("after a capped jump the key should be in debt: %+v", o)
	}
	// The charge was capped at B + r·S + 1 = 103 units: 3 s of refill
	// clears it, where 2^40 units would deny for centuries.
	clk.ns.Add(int64(3 * time.Second))
	if o := take(t, n, peek); !o.Allowed || o.Remaining != lim.Burst {
		t.Fatalf("3 s after the capped jump: %+v, want full", o)
	}
}

func TestSecretKeyAndLabel(t *testing.T) {
	key := []byte("0123456789abcdef")
	nodes := startCluster(t, 2, func(_ int, c *Config) { c.SecretKey = key })
	var rejected []string
	for _, tc := range []struct {
		name string
		mut  func(c *Config)
		ok   bool
	}{
		{"same key", func(c *Config) { c.SecretKey = key }, true},
		{"no key", func(c *Config) {}, false},
		{"other key", func(c *Config) { c.SecretKey = []byte("fedcba9876543210") }, false},
		{"other label", func(c *Config) { c.SecretKey = key; c.Label = "another-cluster" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, 9)
			cfg.Seeds = []string{nodes[0].Addr()}
			cfg.Memberlist.TCPTimeout = 500 * time.Millisecond
			tc.mut(&cfg)
			n, err := New(cfg)
			if err == nil {
				t.Cleanup(func() { _ = n.Close() })
			}
			if tc.ok != (err == nil) {
				t.Fatalf("join: err %v, want success %v", err, tc.ok)
			}
			if !tc.ok && !errors.Is(err, ratelimit.ErrUnavailable) {
				t.Fatalf("join error %v does not wrap ErrUnavailable", err)
			}
			if !tc.ok {
				rejected = append(rejected, cfg.Name)
			}
		})
	}
	// The rejected nodes never became members.
	for _, n := range nodes {
		for _, m := range n.Members() {
			if slices.Contains(rejected, m) {
				t.Errorf("%s lists rejected node %s as a member", n.Name(), m)
			}
		}
	}
}

// TestSyncBatches checks that sync packets fit memberlist's UDP buffer and
// that a batch too large for UDP (10,000 changed keys) goes over TCP and
// arrives whole.
func TestSyncBatches(t *testing.T) {
	ts, mut := withDropTransports(t, 2)
	nodes := startCluster(t, 2, mut)
	ctx := context.Background()
	lim := ratelimit.Limit{Count: 1, Period: time.Hour, Burst: 5}
	c := ratelimit.Check{Namespace: "batch", Algorithm: tokenbucket.New(), Limit: lim, Cost: 1}
	touch := func(n int) {
		for i := range n {
			c.Key = fmt.Sprintf("k%06d", i)
			if _, err := nodes[0].Apply(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	touch(300)
	waitFor(t, 3*time.Second, func() string {
		if got := len(nodes[1].counters("batch")); got != 300 {
			return fmt.Sprintf("node 1 knows %d keys, want 300", got)
		}
		return ""
	})
	ts[0].mu.Lock()
	biggest := ts[0].maxWrite
	ts[0].mu.Unlock()
	if limit := nodes[0].cfg.Memberlist.UDPBufferSize; biggest > limit {
		t.Fatalf("a UDP packet of %d bytes exceeds UDPBufferSize %d", biggest, limit)
	}
	if st := nodes[0].Stats(); st.Reliable != 0 {
		t.Fatalf("300 keys went over TCP: %+v", st)
	}
	// Hold the sync tick off while touching, so that all 10,000 keys go
	// in one batch however slowly they are touched (-race, busy cores).
	nodes[0].syncMu.Lock()
	touch(10000)
	nodes[0].syncMu.Unlock()
	waitFor(t, 5*time.Second, func() string {
		if got := len(nodes[1].counters("batch")); got != 10000 {
			return fmt.Sprintf("node 1 knows %d keys, want 10000", got)
		}
		return ""
	})
	if st := nodes[0].Stats(); st.Reliable == 0 {
		t.Fatalf("10,000 keys did not overflow to TCP: %+v", st)
	}
}
