package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/conformance/storetest"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// startCluster starts size gossip nodes on loopback with the local preset,
// all joined to the first, and waits until each sees every other.
func startCluster(t *testing.T, size int) []*cluster.Node {
	t.Helper()
	var nodes []*cluster.Node
	for i := range size {
		cfg := cluster.DefaultLocalConfig()
		cfg.Name = fmt.Sprintf("%s-%d", t.Name(), i)
		cfg.Label = "sluice-e2e"
		if i > 0 {
			cfg.Seeds = []string{nodes[0].Addr()}
		}
		n, err := cluster.New(cfg)
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		t.Cleanup(func() { _ = n.Close() })
		nodes = append(nodes, n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, n := range nodes {
		for len(n.Members()) != size {
			if time.Now().After(deadline) {
				t.Fatalf("%s sees %d members, want %d", n.Name(), len(n.Members()), size)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nodes
}

// chargers are the suite's algorithms the cluster supports.
func chargers() []ratelimit.Algorithm {
	var out []ratelimit.Algorithm
	for _, a := range algorithms() {
		if _, ok := a.(ratelimit.Charger); ok {
			out = append(out, a)
		}
	}
	return out
}

// TestClusterNode runs the conformance suite on one node of a 3-node
// gossip cluster, read through the wall clock. The node is an exact store
// for its own decisions except that a key it has never heard of starts at
// its share of the burst (the startup allowance), so the exact suite runs
// on a node whose peers have left the cluster. The suite's approximate
// mode across the nodes of a live 3-node cluster is the cluster module's
// TestStoreConformanceCluster, and the cross-node bound over time is
// measured by its drift tests.
func TestClusterNode(t *testing.T) {
	nodes := startCluster(t, 3)
	for _, n := range nodes[1:] {
		if err := n.Leave(time.Second); err != nil {
			t.Fatalf("leave: %v", err)
		}
		_ = n.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(nodes[0].Members()) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("node 0 still sees %d members after the others left", len(nodes[0].Members()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	storetest.Run(t, storetest.Harness{NewStore: storetest.Shared(nodes[0]), Algorithms: chargers()})
}

// TestClusterSharesOneLimit checks the cluster's claim end to end: three
// nodes taking from one key with a burst of 60 and a negligible refill
// admit 60 in total (within one unit per node), however the calls are
// spread, once each node has seen the others' consumption.
func TestClusterSharesOneLimit(t *testing.T) {
	nodes := startCluster(t, 3)
	lim := ratelimit.Limit{Count: 1, Period: 1000 * time.Hour, Burst: 60}
	c := ratelimit.Check{Namespace: "e2e", Key: fmt.Sprintf("shared-%d", time.Now().UnixNano()), Algorithm: tokenbucket.New(), Limit: lim, Cost: 1}
	ctx := context.Background()
	var admitted int64
	for round := range 20 {
		for _, n := range nodes {
			for range 5 {
				o, err := n.Apply(ctx, c)
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				if o.Allowed {
					admitted++
				}
			}
		}
		time.Sleep(30 * time.Millisecond)
	}
	if admitted < lim.Burst || admitted > lim.Burst+int64(len(nodes)) {
		t.Fatalf("three nodes admitted %d from one key of burst %d, want %d..%d", admitted, lim.Burst, lim.Burst, lim.Burst+int64(len(nodes)))
	}
}
