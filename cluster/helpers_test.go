package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/core/ratelimit"
)

func TestMain(m *testing.M) {
	if maybeRunChild() {
		return
	}
	goleak.VerifyTestMain(m)
}

// testConfig returns a loopback config for node i of a test cluster.
func testConfig(t testing.TB, i int) Config {
	cfg := DefaultLocalConfig()
	cfg.Name = fmt.Sprintf("n%d-%x", i, rand.Uint32())
	cfg.Label = "sluice-test"
	return cfg
}

// startCluster starts size nodes, node 0 first and the others joining it,
// and waits until every node sees every other. mut may adjust each
// node's config.
func startCluster(t testing.TB, size int, mut func(i int, c *Config)) []*Node {
	t.Helper()
	nodes, err := startClusterE(t, size, mut)
	if err != nil {
		t.Fatal(err)
	}
	return nodes
}

// startClusterE is startCluster for use off the test goroutine: it
// reports failures as an error. Nodes are closed by t's cleanup.
func startClusterE(t testing.TB, size int, mut func(i int, c *Config)) ([]*Node, error) {
	nodes := make([]*Node, 0, size)
	for i := range size {
		n, err := startNode(t, i, nodes, mut)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
	}
	return nodes, waitE(10*time.Second, membersCond(nodes, size))
}

// startNode starts node i joining seeds[0] when there is one.
func startNode(t testing.TB, i int, seeds []*Node, mut func(i int, c *Config)) (*Node, error) {
	cfg := testConfig(t, i)
	if len(seeds) > 0 {
		cfg.Seeds = []string{seeds[0].Addr()}
	}
	if mut != nil {
		mut(i, &cfg)
	}
	n, err := New(cfg)
	if err != nil {
		return nil, fmt.Errorf("node %d: %w", i, err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return n, nil
}

func membersCond(nodes []*Node, want int) func() string {
	return func() string {
		for _, n := range nodes {
			if got := len(n.Members()); got != want {
				return fmt.Sprintf("node %s sees %d members, want %d", n.Name(), got, want)
			}
		}
		return ""
	}
}

// waitFor polls cond every 10ms until it returns "" or within passes.
func waitFor(t testing.TB, within time.Duration, cond func() string) {
	t.Helper()
	if err := waitE(within, cond); err != nil {
		t.Fatal(err)
	}
}

// waitE polls cond every 10ms until it returns "" or within passes.
func waitE(within time.Duration, cond func() string) error {
	deadline := time.Now().Add(within)
	for {
		msg := cond()
		if msg == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %s", within, msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func newKey(t testing.TB) string {
	return fmt.Sprintf("%s-%x", t.Name(), rand.Uint64())
}

func take(t testing.TB, n *Node, c ratelimit.Check) ratelimit.Outcome {
	t.Helper()
	o, err := n.Apply(context.Background(), c)
	if err != nil {
		t.Fatalf("%s: apply: %v", n.Name(), err)
	}
	return o
}

func soak() bool { return os.Getenv("SLUICE_SOAK") == "1" }

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}

var _ = slices.Max[[]int64]
