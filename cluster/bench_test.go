package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// benchLimit never denies during a benchmark, so every call does the full
// work of an admission (and, on a node, marks the key for the next sync).
var benchLimit = ratelimit.Limit{Count: 1 << 30, Period: time.Second, Burst: 1 << 30}

// BenchmarkDecide compares one decision on a node of a 3-node cluster
// with the embedded memory store (target: at most 1.5× its latency), for
// one hot key and for 10,000 keys. backend=cluster-sync runs the default
// 25 ms sync, whose background work (encoding, sending, and the two peers
// in this same process merging) shares the CPU and is counted in the
// allocations; backend=cluster-hotpath sets a 10 s interval to isolate the
// decision itself.
func BenchmarkDecide(b *testing.B) {
	mem, err := memstore.New()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = mem.Close() })
	synced := startCluster(b, 3, nil)
	quiet := startCluster(b, 3, func(_ int, c *Config) { c.SyncInterval = 10 * time.Second })
	stores := []struct {
		name string
		st   ratelimit.Store
	}{{"memory", mem}, {"cluster-hotpath", quiet[0]}, {"cluster-sync", synced[0]}}
	for _, keys := range []int{1, 10000} {
		names := make([]string, keys)
		for i := range names {
			names[i] = fmt.Sprintf("bench-key-%d", i)
		}
		for _, s := range stores {
			b.Run(fmt.Sprintf("keys=%d/backend=%s", keys, s.name), func(b *testing.B) {
				ctx := context.Background()
				c := ratelimit.Check{Namespace: "bench", Algorithm: tokenbucket.New(), Limit: benchLimit, Cost: 1}
				for _, k := range names { // create the keys outside the timing
					c.Key = k
					if _, err := s.st.Apply(ctx, c); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					c.Key = names[i%keys]
					i++
					if _, err := s.st.Apply(ctx, c); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkSyncTraffic measures what one node sends when 10,000 keys all
// change in every sync interval (the worst case for the traffic): each
// iteration takes one unit from every key and runs one sync. It reports
// bytes and messages per round per peer, and the bytes per second a node
// sends to each peer at the LAN preset's 50 ms interval.
func BenchmarkSyncTraffic(b *testing.B) {
	const keys = 10000
	nodes := startCluster(b, 3, func(_ int, c *Config) { c.SyncInterval = 10 * time.Second })
	n := nodes[0]
	ctx := context.Background()
	c := ratelimit.Check{Namespace: "traffic", Algorithm: tokenbucket.New(), Limit: benchLimit, Cost: 1}
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("user:%08d", i)
	}
	before := n.Stats()
	rounds := 0
	for b.Loop() {
		for _, k := range names {
			c.Key = k
			if _, err := n.Apply(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
		n.syncOnce()
		rounds++
	}
	after := n.Stats()
	peers := float64(len(nodes) - 1)
	perRound := float64(after.SentBytes-before.SentBytes) / float64(rounds) / peers
	b.ReportMetric(perRound, "B/round/peer")
	b.ReportMetric(float64(after.SentPackets-before.SentPackets)/float64(rounds)/peers, "msgs/round/peer")
	b.ReportMetric(perRound/keys, "B/key")
	b.ReportMetric(perRound/0.05, "B/s/peer@50ms")
}
