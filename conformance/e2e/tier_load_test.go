package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/backends/redisstore"
	"github.com/sluicehq/sluice/conformance/e2e/testenv"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/tier"
)

// redisCommands returns the number of commands the server has run, from
// INFO commandstats (the INFO calls themselves included, two per
// measurement).
func redisCommands(tb testing.TB, c *redis.Client) int64 {
	tb.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var n int64
	for line := range strings.SplitSeq(info, "\n") {
		_, rest, ok := strings.Cut(line, ":calls=")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		v, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			tb.Fatal(err)
		}
		n += v
	}
	return n
}

// BenchmarkTierLoad compares the plain Redis store with the decorated one
// at 64 callers, on one hot key and on 100k random keys, reporting Redis
// commands per decision and the P99 latency of a decision. Compare with
// benchstat: the ratio of sec/op is the ratio of decisions per second.
func BenchmarkTierLoad(b *testing.B) {
	srv := testenv.Redis(b)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { _ = admin.Close() })
	// The hot key's limit, 100k per second, is above what the plain store
	// decides here, so it admits every call; the decorated store decides
	// faster than the limit and denies the excess from cached denials.
	limit := ratelimit.PerSecond(100_000)
	const randomKeys = 100_000
	for _, keys := range []string{"hot", "random100k"} {
		for _, mode := range []string{"plain", "lease", "sync"} {
			b.Run(fmt.Sprintf("keys=%s/store=%s", keys, mode), func(b *testing.B) {
				prefix := "load" + strconv.FormatUint(rand.Uint64(), 36) + ":"
				c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 64})
				b.Cleanup(func() { _ = c.Close() })
				rs, err := redisstore.New(c, redisstore.WithPrefix(prefix))
				if err != nil {
					b.Fatal(err)
				}
				var st ratelimit.Store = rs
				if mode != "plain" {
					m := tier.Lease
					if mode == "sync" {
						m = tier.Sync
					}
					ts, err := tier.New(rs, tier.WithRule("load", tier.Rule{Mode: m}))
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { _ = ts.Close() })
					st = ts
				}
				var (
					mu  sync.Mutex
					lat []time.Duration
				)
				b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
				b.ReportAllocs()
				before := redisCommands(b, admin)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					c := ratelimit.Check{Namespace: "load", Key: "hot", Algorithm: gcra.New(), Limit: limit, Cost: 1}
					r := rand.New(rand.NewPCG(rand.Uint64(), 1))
					own := make([]time.Duration, 0, 1024)
					for i := 0; pb.Next(); i++ {
						if keys != "hot" {
							c.Key = "k" + strconv.Itoa(r.IntN(randomKeys))
						}
						start := time.Now()
						if _, err := st.Apply(context.Background(), c); err != nil {
							b.Error(err)
							return
						}
						if i%16 == 0 { // a sample keeps the timing cost off most calls
							own = append(own, time.Since(start))
						}
					}
					mu.Lock()
					lat = append(lat, own...)
					mu.Unlock()
				})
				b.StopTimer()
				cmds := redisCommands(b, admin) - before - 1
				b.ReportMetric(float64(cmds)/float64(b.N), "redis-cmds/op")
				if len(lat) > 0 {
					slices.Sort(lat)
					b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
				}
			})
		}
	}
}
