package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms/catalog"
	"github.com/sluicehq/sluice/algorithms/fixedwindow"
	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/core/ratelimit"
)

func TestJoinSyncAndCharge(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	lim := ratelimit.Limit{Count: 1, Period: time.Hour, Burst: 30}
	c := ratelimit.Check{Namespace: "ns", Key: newKey(t), Algorithm: tokenbucket.New(), Limit: lim, Cost: 1}
	// Node 0 takes 10; after a sync every node's copy shows 20 left.
	for range 10 {
		if o := take(t, nodes[0], c); !o.Allowed {
			t.Fatalf("take denied: %+v", o)
		}
	}
	peek := c
	peek.Cost = 0
	waitFor(t, 3*time.Second, func() string {
		for _, n := range nodes {
			if o := take(t, n, peek); o.Remaining != 20 {
				t.Logf("%s stats %+v", n.Name(), n.Stats())
				return n.Name() + " remaining " + itoa(o.Remaining) + ", want 20"
			}
		}
		return ""
	})
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func TestUnsupported(t *testing.T) {
	nodes := startCluster(t, 1, nil)
	ctx := context.Background()
	lim := ratelimit.PerSecond(10)
	_, err := nodes[0].Apply(ctx, ratelimit.Check{Key: "k", Algorithm: plainAlg{}, Limit: lim, Cost: 1})
	if !errors.Is(err, ratelimit.ErrUnsupported) {
		t.Fatalf("plain algorithm: err %v, want ErrUnsupported", err)
	}
	// A fixed window cannot refund.
	_, err = nodes[0].Apply(ctx, ratelimit.Check{Key: "k", Algorithm: fixedwindow.New(), Limit: lim, Cost: 1, Op: ratelimit.OpRefund})
	if !errors.Is(err, ratelimit.ErrUnsupported) {
		t.Fatalf("refund on a fixed window: err %v, want ErrUnsupported", err)
	}
}

func TestMembershipLeaveAndCrash(t *testing.T) {
	const hold = 2 * time.Second
	ts, drops := withDropTransports(t, 4)
	nodes := startCluster(t, 4, func(i int, c *Config) {
		c.FailedHold = hold
		drops(i, c)
	})
	// A graceful leave: the others drop it from N_ref at once.
	if err := nodes[3].Leave(time.Second); err != nil {
		t.Fatalf("leave: %v", err)
	}
	if err := nodes[3].Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	waitFor(t, 5*time.Second, func() string {
		for _, n := range nodes[:3] {
			if st := n.Stats(); st.Members != 3 || st.RefMembers != 3 {
				return fmt.Sprintf("%s after leave: %+v", n.Name(), st)
			}
		}
		return ""
	})
	// A crash: the port refuses connections, so the others reclaim its
	// share as soon as they detect the failure, not after FailedHold.
	if err := nodes[2].Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := nodes[2].Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	waitFor(t, 10*time.Second, func() string {
		for _, n := range nodes[:2] {
			if st := n.Stats(); st.Members != 2 || st.RefMembers != 2 || st.Reclaimed != 1 {
				return fmt.Sprintf("%s after crash: %+v", n.Name(), st)
			}
		}
		return ""
	})
	// A partition drops packets: node 0 cannot tell it from a crash of a
	// host, so it holds node 1 in N_ref for FailedHold, then reclaims.
	ts[0].block(nodes[1].Addr())
	ts[1].block(nodes[0].Addr())
	waitFor(t, 15*time.Second, func() string {
		if st := nodes[0].Stats(); st.Members != 1 || st.RefMembers != 2 || st.Reclaimed != 1 {
			return fmt.Sprintf("%s after the cut: %+v", nodes[0].Name(), st)
		}
		return ""
	})
	waitFor(t, hold+3*time.Second, func() string {
		if st := nodes[0].Stats(); st.RefMembers != 1 || st.Reclaimed != 1 {
			return fmt.Sprintf("%s after FailedHold: %+v", nodes[0].Name(), st)
		}
		return ""
	})
	if _, err := nodes[2].Apply(context.Background(), ratelimit.Check{Key: "k", Algorithm: tokenbucket.New(), Limit: ratelimit.PerSecond(1), Cost: 1}); !errors.Is(err, ratelimit.ErrClosed) {
		t.Fatalf("apply after close: %v, want ErrClosed", err)
	}
}

func TestLateJoinerHasCountersBeforeServing(t *testing.T) {
	nodes := startCluster(t, 2, nil)
	lim := ratelimit.Limit{Count: 1, Period: time.Hour, Burst: 50}
	c := ratelimit.Check{Namespace: "late", Key: newKey(t), Algorithm: tokenbucket.New(), Limit: lim, Cost: 1}
	// The startup allowance may refuse some of these; count what passed.
	var admitted int64
	for i := range 35 {
		if take(t, nodes[i/30], c).Allowed {
			admitted++
		}
	}
	want := lim.Burst - admitted
	peek := c
	peek.Cost = 0
	waitFor(t, 3*time.Second, func() string {
		for _, n := range nodes {
			if o := take(t, n, peek); o.Remaining != want {
				return fmt.Sprintf("%s remaining %d, want %d", n.Name(), o.Remaining, want)
			}
		}
		return ""
	})
	late, err := startNode(t, 2, nodes, nil)
	if err != nil {
		t.Fatal(err)
	}
	// No waiting: New returns after the join's push/pull was merged.
	if o := take(t, late, peek); o.Remaining != want {
		t.Fatalf("late joiner's first peek: remaining %d, want %d", o.Remaining, want)
	}
}

func TestStartupAllowance(t *testing.T) {
	clk := &fakeClock{}
	clk.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	// A 10 s sync interval keeps the allowance (three ticks) in force.
	nodes := startCluster(t, 3, func(_ int, c *Config) { c.Clock = clk; c.SyncInterval = 10 * time.Second })
	lim := ratelimit.Limit{Count: 100, Period: time.Second, Burst: 100}
	c := ratelimit.Check{Namespace: "cold", Key: newKey(t), Algorithm: tokenbucket.New(), Limit: lim, Cost: 1}
	allowed := 0
	for range 100 {
		if take(t, nodes[0], c).Allowed {
			allowed++
		}
	}
	// ceil(B/N) = 34: the three nodes together admit at most B + 2.
	if allowed != 34 {
		t.Fatalf("a key never heard of admitted %d at once, want ceil(100/3) = 34", allowed)
	}
	// Its refill share grows with time: 300 ms adds r·0.3/3 = 10.
	clk.ns.Add(int64(300 * time.Millisecond))
	more := 0
	for range 100 {
		if take(t, nodes[0], c).Allowed {
			more++
		}
	}
	if more != 10 {
		t.Fatalf("300 ms later the allowance admitted %d more, want 10", more)
	}
}

func TestRefundPropagates(t *testing.T) {
	nodes := startCluster(t, 2, nil)
	lim := ratelimit.Limit{Count: 1, Period: time.Hour, Burst: 10}
	c := ratelimit.Check{Namespace: "refund", Key: newKey(t), Algorithm: tokenbucket.New(), Limit: lim, Cost: 1}
	// Let the startup allowance lapse before taking.
	take(t, nodes[0], c)
	time.Sleep(4 * nodes[0].cfg.SyncInterval)
	for range 4 {
		take(t, nodes[0], c)
	}
	back := c
	back.Op, back.Cost = ratelimit.OpRefund, 2
	take(t, nodes[0], back)
	peek := c
	peek.Cost = 0
	for _, n := range nodes {
		waitFor(t, 3*time.Second, func() string {
			if o := take(t, n, peek); o.Remaining != 7 {
				return fmt.Sprintf("%s remaining %d, want 7 (took 5, refunded 2)", n.Name(), o.Remaining)
			}
			return ""
		})
	}
}

func TestResetEverywhere(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	lim := ratelimit.Limit{Count: 1, Period: time.Hour, Burst: 10}
	c := ratelimit.Check{Namespace: "reset", Key: newKey(t), Algorithm: tokenbucket.New(), Limit: lim, Cost: 1}
	take(t, nodes[0], c)
	time.Sleep(5 * nodes[0].cfg.SyncInterval) // past the startup allowance
	for range 5 {
		take(t, nodes[0], c)
	}
	peek := c
	peek.Cost = 0
	waitFor(t, 3*time.Second, func() string {
		for _, n := range nodes {
			if o := take(t, n, peek); o.Remaining != 4 {
				return fmt.Sprintf("%s remaining %d before reset, want 4", n.Name(), o.Remaining)
			}
		}
		return ""
	})
	if err := nodes[1].Reset(context.Background(), c.Namespace, c.Key); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, func() string {
		for _, n := range nodes {
			if o := take(t, n, peek); o.Remaining != lim.Burst {
				return fmt.Sprintf("%s remaining %d after reset, want %d", n.Name(), o.Remaining, lim.Burst)
			}
		}
		return ""
	})
}

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		mut  func(c *Config)
	}{
		{"empty name", func(c *Config) { c.Name = "" }},
		{"long name", func(c *Config) { c.Name = string(make([]byte, 513)) }},
		{"no bind address", func(c *Config) { c.BindAddr = "" }},
		{"bad port", func(c *Config) { c.BindPort = 70000 }},
		{"sync too fast", func(c *Config) { c.SyncInterval = time.Millisecond }},
		{"sync too slow", func(c *Config) { c.SyncInterval = time.Minute }},
		{"short key", func(c *Config) { c.SecretKey = []byte("short") }},
		{"long label", func(c *Config) { c.Label = string(make([]byte, 256)) }},
		{"negative hold", func(c *Config) { c.FailedHold = -time.Second }},
		{"negative reconnect", func(c *Config) { c.ReconnectInterval = -time.Second }},
		{"tiny messages", func(c *Config) { c.MaxMessageBytes = 100 }},
		{"nil algorithm", func(c *Config) { c.Algorithms = []ratelimit.Algorithm{nil} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, 0)
			tc.mut(&cfg)
			n, err := New(cfg)
			if err == nil {
				_ = n.Close()
			}
			if !errors.Is(err, ratelimit.ErrInvalidOption) {
				t.Fatalf("New: err %v, want ErrInvalidOption", err)
			}
		})
	}
	for _, cfg := range []Config{DefaultLANConfig(), DefaultLocalConfig()} {
		cfg.Name = "preset"
		if err := cfg.validate(); err != nil {
			t.Errorf("preset %+v: %v", cfg, err)
		}
	}
}

// forget drops the node's record of a key, as the idle sweep does.
func (n *Node) forget(ns, key string) {
	sh, h := n.locate(ns, key)
	sh.mu.Lock()
	if r := sh.get(h, ns, key); r != nil {
		sh.remove(r)
	}
	sh.mu.Unlock()
}

// TestForgottenKeyNotChargedTwice: a node that forgot a key while it sat
// idle (its view refilled) must not be charged again, when the key comes
// back, for what the others admitted before the idleness, nor for what
// they relay of each other's earlier counters. Such a charge left its view
// below the others' for as long as demand kept the key busy.
func TestForgottenKeyNotChargedTwice(t *testing.T) {
	clk := &fakeClock{}
	clk.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	nodes := startCluster(t, 3, func(_ int, c *Config) {
		c.Clock = clk
		c.PushPullInterval = 100 * time.Millisecond
	})
	lim := ratelimit.Limit{Count: 100, Period: time.Second, Burst: 100}
	c := ratelimit.Check{Namespace: "forget", Key: newKey(t), Algorithm: tokenbucket.New(), Limit: lim, Cost: 1}
	peek := c
	peek.Cost = 0
	settled := func(want int64) func() string {
		return func() string {
			for _, n := range nodes {
				if o := take(t, n, peek); o.Remaining != want {
					return fmt.Sprintf("%s remaining %d, want %d", n.Name(), o.Remaining, want)
				}
			}
			return ""
		}
	}
	for _, n := range nodes {
		for range 30 {
			if !take(t, n, c).Allowed {
				t.Fatalf("%s: a take within the startup allowance was refused", n.Name())
			}
		}
	}
	waitFor(t, 3*time.Second, settled(10))
	// Let the startup allowance lapse (it is timed by sync ticks).
	waitFor(t, 3*time.Second, func() string {
		for _, n := range nodes {
			sh, h := n.locate(c.Namespace, c.Key)
			sh.mu.Lock()
			young := sh.get(h, c.Namespace, c.Key).allowN > 1
			sh.mu.Unlock()
			if young {
				return n.Name() + " still holds the key to its startup allowance"
			}
		}
		return ""
	})
	clk.ns.Add(int64(2 * time.Second)) // every view refills while idle
	nodes[0].forget(c.Namespace, c.Key)
	for _, n := range nodes {
		if !take(t, n, c).Allowed {
			t.Fatalf("%s: the first take after idleness was refused", n.Name())
		}
	}
	waitFor(t, 3*time.Second, settled(97))
	// Push/pull exchanges the full state a few times over: it must not
	// bring the old counters back either.
	time.Sleep(5 * 100 * time.Millisecond)
	if msg := settled(97)(); msg != "" {
		t.Fatal(msg)
	}
}

// TestInitialStateFull checks what entryOf assumes of every algorithm a
// node applies: the initial (empty) state holds the whole burst.
func TestInitialStateFull(t *testing.T) {
	lim := ratelimit.Limit{Count: 7, Period: time.Minute, Burst: 5}
	now := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC).UnixNano()
	for _, a := range catalog.All() {
		if _, ok := a.(ratelimit.Charger); !ok {
			continue
		}
		if o, _, err := a.Decide(nil, now, lim, 0, nil); err != nil || o.Remaining != lim.Burst {
			t.Errorf("%s: a peek at the initial state gives %+v, %v; want %d remaining", a.Name(), o, err, lim.Burst)
		}
	}
}

// TestDecisionAllocatesNothing checks that a decision on a key the node
// holds allocates nothing, through the states a key goes through while the
// node syncs: under its startup allowance, and re-armed after the
// allowance lifted and its state expired (benchLimit refills in a
// nanosecond). Every measured run decides on another key, so that a path
// taken once per key would show.
func TestDecisionAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates; run without -race")
	}
	nodes := startCluster(t, 3, nil)
	n := nodes[0]
	ctx := t.Context()
	c := ratelimit.Check{Namespace: "allocs", Algorithm: tokenbucket.New(), Limit: benchLimit, Cost: 1}
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%d", newKey(t), i)
		c.Key = keys[i]
		take(t, n, c)
	}
	var i int
	decide := func() {
		c.Key = keys[i]
		i++
		if _, err := n.Apply(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	young := func() string {
		for _, k := range keys {
			sh, h := n.locate(c.Namespace, k)
			sh.mu.Lock()
			allowN := sh.get(h, c.Namespace, k).allowN
			sh.mu.Unlock()
			if allowN > 1 {
				return k + " is still under its startup allowance"
			}
		}
		return ""
	}
	for round := range 3 {
		i = 0 // AllocsPerRun decides once before it measures
		if allocs := testing.AllocsPerRun(len(keys)-1, decide); allocs != 0 {
			t.Fatalf("round %d: %v allocations per decision, want 0", round, allocs)
		}
		// Let the allowances lift: the next round re-arms them.
		waitFor(t, 5*time.Second, young)
	}
}
