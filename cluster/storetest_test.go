package cluster

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/conformance/storetest"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/arith"
)

// chargers returns the suite's default algorithms the cluster supports.
func chargers() []ratelimit.Algorithm {
	var out []ratelimit.Algorithm
	for _, a := range storetest.DefaultAlgorithms() {
		if _, ok := a.(ratelimit.Charger); ok {
			out = append(out, a)
		}
	}
	return out
}

// TestStoreConformance runs the conformance suite on a node of a one-node
// cluster with an injected clock: the whole Store contract (agreement
// with each algorithm at fixed instants, linearizability, composites,
// isolation, TTL, reset, peek, close, contexts, bad input), exactly, with
// memberlist and the sync loop running. TestStoreConformanceCluster runs
// it across the nodes of a 3-node cluster.
func TestStoreConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster node; skipped in -short mode")
	}
	clk := storetest.NewClock(time.Unix(0, 0))
	nodes := startCluster(t, 1, func(_ int, c *Config) { c.Clock = clk })
	storetest.Run(t, storetest.Harness{
		NewStore:   storetest.Shared(nodes[0]),
		Clock:      clk,
		Algorithms: chargers(),
	})
}

// TestStoreConformanceCluster runs the conformance suite in its
// approximate mode on a 3-node cluster reading the wall clock: each store
// the suite asks for is a client of the next node in turn, so every
// cross-client step of the suite crosses nodes. Writes must reach the
// other nodes through gossip within the suite's settle time; concurrent
// admission on a new key, spread over the nodes, must stay within the
// bound of the package doc (see docBound); composites, isolation, peek,
// reset, TTL, close, contexts, bad input and corrupt state are checked
// step by step across nodes. Agreement of every decision with the
// algorithm and linearizability are skipped by the suite: the cluster
// claims neither.
//
// The run found three defects of the cluster, now fixed in node.go and
// sync.go: (1) a take above a node's share on a key it never admitted
// from was denied for ever (heldForever checks it first, so a regression
// fails with a clear message); (2) a sync tick read its clock before
// taking each shard's lock, so a learned level could be one unit short;
// (3) a node that first heard of a new key from a peer's level got no
// startup allowance and could overshoot a staggered cold start.
func TestStoreConformanceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster; skipped in -short mode")
	}
	const size = 3
	nodes := startCluster(t, size, nil)
	if msg := heldForever(t, nodes[0]); msg != "" {
		t.Fatal(msg)
	}
	handles := make([]func(*testing.T) ratelimit.Store, size)
	for i, n := range nodes {
		handles[i] = storetest.Shared(n) // the suite closes its handles; the nodes are closed by startCluster's cleanup
	}
	var next atomic.Uint64
	interval := nodes[0].cfg.SyncInterval
	storetest.Run(t, storetest.Harness{
		NewStore: func(t *testing.T) ratelimit.Store {
			return handles[(next.Add(1)-1)%size](t)
		},
		Algorithms: chargers(),
		Approximate: func(l ratelimit.Limit, stores int) storetest.Bound {
			return docBound(l, min(stores, size), interval)
		},
	})
}

// heldForever returns "" when a take of the whole burst of a new key on
// n (one node of three) is admitted within 2 s, once n's startup allowance
// lifts, as the package doc promises; otherwise it describes the defect
// that once held such a take back for ever (the allowance re-armed at
// every take, and a denied composite dropping the records it created).
func heldForever(t *testing.T, n *Node) string {
	t.Helper()
	c := ratelimit.Check{Key: newKey(t), Algorithm: chargers()[0], Limit: ratelimit.Limit{Count: 1, Period: 1000 * time.Hour, Burst: 3}, Cost: 3}
	deadline := time.Now().Add(2 * time.Second)
	var o ratelimit.Outcome
	for time.Now().Before(deadline) {
		if o = take(t, n, c); o.Allowed {
			return ""
		}
		time.Sleep(min(max(o.RetryAfter, time.Millisecond), 100*time.Millisecond)) // the cluster's allowance runs on wall-clock sync ticks
	}
	return fmt.Sprintf("cluster defect, not a suite limit: a take of the whole burst (3) of a new key on one node of 3 is still denied after 2 s of retrying after RetryAfter (last outcome %+v); "+
		"the allowance is re-armed at every take on a key the node never admitted from", o)
}

// docBound is the package doc's bound for units admitted on a key no node
// has heard of, spread over n nodes syncing every s: over by at most
// (n−1)·(b⁺ + r·Δ) + n with b⁺ = 0 (the startup allowance), and, while
// demand exceeds the rate, under by at most (n−1)·r·Δ + n. Δ = s + d is
// taken with d = 100 ms, far above loopback delivery, so that a starved
// machine's late sends stay inside it; r·Δ is rounded up to whole units.
func docBound(l ratelimit.Limit, n int, s time.Duration) storetest.Bound {
	delta := s + 100*time.Millisecond
	rDelta := int64(arith.MulDivCeil(l.Count, int64(delta), int64(l.Period)))
	k := int64(n)
	return storetest.Bound{Under: (k-1)*rDelta + k, Over: (k-1)*rDelta + k}
}

// TestDocBound pins docBound to the package doc's formula.
func TestDocBound(t *testing.T) {
	frozen := ratelimit.Limit{Count: 1, Period: 1000 * time.Hour, Burst: 100}
	perSec := ratelimit.Limit{Count: 100, Period: time.Second, Burst: 100}
	for _, tc := range []struct {
		name string
		l    ratelimit.Limit
		n    int
		want storetest.Bound
	}{
		{"OneNode", frozen, 1, storetest.Bound{Under: 1, Over: 1}},
		{"ThreeNodesFrozen", frozen, 3, storetest.Bound{Under: 5, Over: 5}},
		{"ThreeNodes100PerSec", perSec, 3, storetest.Bound{Under: 2*13 + 3, Over: 2*13 + 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := docBound(tc.l, tc.n, 25*time.Millisecond); got != tc.want {
				t.Errorf("docBound(%s, %d, 25ms) = %+v, want %+v", tc.l, tc.n, got, tc.want)
			}
		})
	}
}
