package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/cputime"
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
// decision itself. cpu-ns/op is the process's CPU time per call, every
// goroutine included: on a shared machine it varies far less than the
// wall time, and it counts the background work the wall time may hide on
// an idle second core.
func BenchmarkDecide(b *testing.B) {
	mem, err := memstore.New()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = mem.Close() })
	synced := startCluster(b, 3, nil)
	quiet := startCluster(b, 3, func(_ int, c *Config) { c.SyncInterval = 10 * time.Second })
	stores := []struct {
		name  string
		st    ratelimit.Store
		nodes []*Node
	}{{"memory", mem, nil}, {"cluster-hotpath", quiet[0], quiet}, {"cluster-sync", synced[0], synced}}
	for _, keys := range []int{1, 10000} {
		names := make([]string, keys)
		for i := range names {
			names[i] = fmt.Sprintf("bench-key-%d", i)
		}
		for _, s := range stores {
			warm := false
			b.Run(fmt.Sprintf("keys=%d/backend=%s", keys, s.name), func(b *testing.B) {
				ctx := context.Background()
				c := ratelimit.Check{Namespace: "bench", Algorithm: tokenbucket.New(), Limit: benchLimit, Cost: 1}
				for _, k := range names { // create the keys outside the timing
					c.Key = k
					if _, err := s.st.Apply(ctx, c); err != nil {
						b.Fatal(err)
					}
				}
				if s.nodes != nil && !warm {
					// The testing package runs this function several
					// times to size b.N; the peers need to learn the
					// keys only once (at cluster-hotpath's 10 s interval
					// each wait is 80 s).
					warm = true
					// Let the peers learn the keys before the timing, so
					// that creating their records is not counted.
					s.nodes[0].syncOnce()
					time.Sleep(8 * s.nodes[0].cfg.SyncInterval)
				}
				b.ReportAllocs()
				cpu0 := cputime.Process()
				i := 0
				for b.Loop() {
					c.Key = names[i%keys]
					i++
					if _, err := s.st.Apply(ctx, c); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N), "cpu-ns/op")
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

// BenchmarkMerge measures what a node spends per entry merging a peer's
// sync batch of 10,000 keys it already holds, every counter one unit
// higher than in the previous batch: decoding, the record lookup and the
// charge. It is the receiving half of the background cost per key and
// sync interval that BenchmarkDecide's backend=cluster-sync pays. (A
// classic loop: each batch is encoded with the timer stopped.)
func BenchmarkMerge(b *testing.B) {
	const keys = 10000
	nodes := startCluster(b, 1, func(_ int, c *Config) { c.SyncInterval = 10 * time.Second })
	n := nodes[0]
	lim := ratelimit.Limit{Count: 1 << 20, Period: time.Hour, Burst: 1 << 36}
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("user:%08d", i)
	}
	enc := newEncoder(kindSync, 1<<30)
	batch := func(count uint64) []byte {
		for _, k := range names {
			enc.add(&wireEntry{
				rule:      wireRule{ns: "merge", alg: "tokenbucket", limit: lim},
				key:       k,
				remaining: lim.Burst - int64(count),
				comps:     []wireComp{{origin: "peer", inc: 1, count: count}},
			})
		}
		return enc.finish()
	}
	var m message
	n.handle(&m, batch(1)) // the keys exist from here on
	b.ReportAllocs()
	b.ResetTimer()
	var cpu time.Duration
	for i := range b.N {
		b.StopTimer()
		msg := batch(uint64(i + 2))
		cpu0 := cputime.Process()
		b.StartTimer()
		n.handle(&m, msg)
		cpu += cputime.Process() - cpu0
	}
	b.ReportMetric(float64(cpu)/float64(b.N*keys), "cpu-ns/entry")
}
