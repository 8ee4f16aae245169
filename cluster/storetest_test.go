package cluster

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/conformance/storetest"
	"github.com/sluicehq/sluice/core/ratelimit"
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
// memberlist and the sync loop running. A node of a larger cluster is the
// same code with peers' charges added and the startup allowance for new
// keys; the suite's cross-client checks expect a write on one client to be
// visible on the next call of another, which gossip cannot give, so the
// cross-node bounds are checked by TestDrift instead.
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
