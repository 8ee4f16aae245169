package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/backends/redisstore"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/cputime"
)

// redisClient connects to SLUICE_BENCH_REDIS_ADDR (for example a
// `redis-server --port 6390 --save ” --appendonly no` started by hand) or
// skips: this module is outside CI, and a benchmark never starts servers.
func redisClient(b *testing.B) *redis.Client {
	addr := os.Getenv("SLUICE_BENCH_REDIS_ADDR")
	if addr == "" {
		b.Skip("set SLUICE_BENCH_REDIS_ADDR to a Redis to benchmark against")
	}
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 128, MaxRetries: -1, ContextTimeoutEnabled: true})
	if err := c.Ping(context.Background()).Err(); err != nil {
		b.Fatalf("redis at %s: %v", addr, err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// redisOpen admits every call at the rates one Redis serves (~60k/s)
// while keeping Burst·Period below 2^50 ns, the bound of redisstore's
// native Lua path (perf-anchors.md's 1e9/s "Open" spec would measure the
// generic compare-and-set path instead).
var redisOpen = ratelimit.PerSecond(1_000_000)

type redisImpl struct {
	name string
	make func(b *testing.B, c *redis.Client) taker
}

func sluiceRedis(alg ratelimit.Algorithm, opts ...redisstore.Option) func(*testing.B, *redis.Client) taker {
	return func(b *testing.B, c *redis.Client) taker {
		s, err := redisstore.New(c, opts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		lim, err := sluice.New(sluice.Rule{Name: "b", Algorithm: alg, Limit: redisOpen, Budget: benchBudget}, sluice.WithStore(s))
		if err != nil {
			b.Fatal(err)
		}
		return func(ctx context.Context, key string) bool {
			d, err := lim.Allow(ctx, key)
			if err != nil {
				b.Error(err)
			}
			return d.Allowed
		}
	}
}

func redisRate(b *testing.B, c *redis.Client) taker {
	l := redis_rate.NewLimiter(c)
	lim := redis_rate.Limit{Rate: int(redisOpen.Count), Burst: int(redisOpen.Burst), Period: redisOpen.Period}
	return func(ctx context.Context, key string) bool {
		res, err := l.Allow(ctx, key, lim)
		if err != nil {
			b.Error(err)
			return false
		}
		return res.Allowed > 0
	}
}

// redisRateAP is redis_rate on go-redis's autopipeliner, with the options
// redisstore.WithAutoPipeline(nil) gives its own (full duplex, a window
// of 1024), so the "-ap" rows compare the limiters on the same client.
func redisRateAP(b *testing.B, c *redis.Client) taker {
	opts := redis.DefaultAutoPipelineOptions()
	opts.FullDuplex, opts.FullDuplexWindow = true, 1024
	ap, err := c.AutoPipelineWithOptions(opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ap.Close() })
	l := redis_rate.NewLimiter(ap)
	lim := redis_rate.Limit{Rate: int(redisOpen.Count), Burst: int(redisOpen.Burst), Period: redisOpen.Period}
	return func(ctx context.Context, key string) bool {
		res, err := l.Allow(ctx, key, lim)
		if err != nil {
			b.Error(err)
			return false
		}
		return res.Allowed > 0
	}
}

// redisImpls are the implementations BenchmarkRedis compares; the "-ap"
// ones send through go-redis's autopipeliner (redisstore.WithAutoPipeline,
// and for redis_rate the same autopipeliner options).
var redisImpls = []redisImpl{
	{"sluice-gcra", sluiceRedis(gcra.New())},
	{"sluice-tokenbucket", sluiceRedis(tokenbucket.New())},
	{"sluice-gcra-ap", sluiceRedis(gcra.New(), redisstore.WithAutoPipeline(nil))},
	{"sluice-tokenbucket-ap", sluiceRedis(tokenbucket.New(), redisstore.WithAutoPipeline(nil))},
	{"redis_rate", redisRate},
	{"redis_rate-ap", redisRateAP},
}

// BenchmarkRedis compares Redis-backed limiters against one server at
// concurrency 1, 8 and 64, on one hot key and on random keys out of a
// million.
func BenchmarkRedis(b *testing.B) {
	c := redisClient(b)
	for _, ks := range []string{"1", "1M"} {
		for _, conc := range []int{1, 8, 64} {
			for _, im := range redisImpls {
				take := im.make(b, c)
				b.Run(fmt.Sprintf("keys=%s/conc=%d/impl=%s", ks, conc, im.name), func(b *testing.B) {
					runConcurrent(b, conc, take, keyChooser("bench:", ks == "1", 1_000_000))
				})
			}
		}
	}
}

// BenchmarkRedisComposite compares one rule with a three-rule composite
// (IP + user + global) sharing one hash tag: both are one script call.
func BenchmarkRedisComposite(b *testing.B) {
	c := redisClient(b)
	s, err := redisstore.New(c, redisstore.WithHashTag(func(_, key string) string {
		// keys look like "<user>|<part>": tag by user so a request's keys share a slot
		user, _, _ := strings.Cut(key, "|")
		return user
	}))
	if err != nil {
		b.Fatal(err)
	}
	l := redisOpen
	one, err := sluice.NewComposite([]sluice.Rule{{Name: "user", Algorithm: gcra.New(), Limit: l, Budget: benchBudget}}, sluice.WithStore(s))
	if err != nil {
		b.Fatal(err)
	}
	three, err := sluice.NewComposite([]sluice.Rule{
		{Name: "ip", Algorithm: gcra.New(), Limit: l, Budget: benchBudget},
		{Name: "user", Algorithm: gcra.New(), Limit: l, Budget: benchBudget},
		{Name: "global", Algorithm: tokenbucket.New(), Limit: l, Budget: benchBudget},
	}, sluice.WithStore(s))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("rules=1", func(b *testing.B) {
		measureCalls(b, c, func() error {
			_, err := one.AllowN(ctx, 1, "u1|user")
			return err
		})
	})
	b.Run("rules=3", func(b *testing.B) {
		measureCalls(b, c, func() error {
			_, err := three.AllowN(ctx, 1, "u1|ip", "u1|user", "u1|global")
			return err
		})
	})
}

// measureCalls runs call b.N times one after another and reports, beside
// the mean, the median call (p50-ns, which a noisy machine's stalls move
// less), this process's CPU time per call (cpu-ns/op) and the server's
// (redis-cpu-ns/op).
func measureCalls(b *testing.B, c *redis.Client, call func() error) {
	b.ReportAllocs()
	took := make([]time.Duration, 0, 1<<16)
	before := serverCounters(b, c)
	cpu0 := cputime.Process()
	for b.Loop() {
		start := time.Now()
		if err := call(); err != nil {
			b.Fatal(err)
		}
		if len(took) < cap(took) {
			took = append(took, time.Since(start))
		}
	}
	cpu := cputime.Process() - cpu0
	after := serverCounters(b, c)
	slices.Sort(took)
	n := float64(b.N)
	b.ReportMetric(float64(took[len(took)/2]), "p50-ns")
	b.ReportMetric(float64(cpu)/n, "cpu-ns/op")
	b.ReportMetric(float64(after.cpu-before.cpu)/n, "redis-cpu-ns/op")
}

// BenchmarkRedisMemoryPerKey reports Redis used_memory per limiter key
// after a million keys, Strict spec (nothing expires during the measurement),
// for two key shapes: "user:0000042" (keylen=12) and a UUID (keylen=36),
// under the rule name "b" for Sluice (untagged keys, as on this single
// server, and hash-tagged ones, as on a Cluster) and redis_rate's "rate:"
// prefix.
// Redis rounds every allocation up to a jemalloc size class, so the figure
// moves in 16-byte steps as keys lengthen (a Redis key of up to 30 bytes
// costs 32, of 31 to 44 bytes 48, of 45 to 60 bytes 64): on this single
// server Sluice's key "rl:b:" + key adds 5 bytes to the caller's, as
// redis_rate's "rate:" does; on a Cluster its hash tag "{abc}:" adds 6
// more, so which size class a key falls in depends on its length. Run with
// -benchtime=1x.
func BenchmarkRedisMemoryPerKey(b *testing.B) {
	c := redisClient(b)
	const n = 1_000_000
	strict := ratelimit.Every(1000*time.Hour, 1).WithBurst(100)
	impls := []redisImpl{
		{"sluice-gcra", func(b *testing.B, c *redis.Client) taker { return strictRedis(b, c, gcra.New(), strict) }},
		{"sluice-tokenbucket", func(b *testing.B, c *redis.Client) taker { return strictRedis(b, c, tokenbucket.New(), strict) }},
		// The layout a Cluster gets: a 6-byte hash tag more per key.
		{"sluice-gcra-tagged", func(b *testing.B, c *redis.Client) taker {
			return strictRedis(b, c, gcra.New(), strict, redisstore.WithHashTag(redisstore.DefaultTag))
		}},
		{"redis_rate", func(b *testing.B, c *redis.Client) taker {
			l := redis_rate.NewLimiter(c)
			lim := redis_rate.Limit{Rate: 1, Burst: 100, Period: 1000 * time.Hour}
			return func(ctx context.Context, key string) bool {
				res, err := l.Allow(ctx, key, lim)
				return err == nil && res.Allowed > 0
			}
		}},
	}
	shapes := []struct {
		name string
		key  func(i int) string
	}{
		{"12", func(i int) string { return fmt.Sprintf("user:%07d", i) }},
		{"36", func(i int) string { return fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i) }},
	}
	for _, shape := range shapes {
		for _, im := range impls {
			b.Run("keys=1M/keylen="+shape.name+"/impl="+im.name, func(b *testing.B) {
				memoryPerKey(b, c, n, im.make(b, c), shape.key)
			})
		}
	}
}

// memoryPerKey reports the used_memory delta per key after n takes on
// distinct keys.
func memoryPerKey(b *testing.B, c *redis.Client, n int, take taker, key func(int) string) {
	ctx := context.Background()
	for b.Loop() {
		// One take first, so the script is in Redis's script cache
		// (FLUSHALL keeps it) before the baseline: its source is not
		// memory per key.
		take(ctx, "warmup")
		if err := c.FlushAll(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		before := usedMemory(b, c)
		// 16 callers, so a million keys load in seconds.
		const callers = 16
		var refused atomic.Int64
		var wg sync.WaitGroup
		for w := range callers {
			wg.Go(func() {
				for i := w; i < n; i += callers {
					if !take(ctx, key(i)) {
						refused.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if r := refused.Load(); r > 0 {
			b.Fatalf("%d takes on new keys were refused or failed", r)
		}
		b.ReportMetric(float64(usedMemory(b, c)-before)/float64(n), "B/key")
		if err := c.FlushAll(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

func strictRedis(b *testing.B, c *redis.Client, alg ratelimit.Algorithm, l ratelimit.Limit, opts ...redisstore.Option) taker {
	s, err := redisstore.New(c, opts...)
	if err != nil {
		b.Fatal(err)
	}
	lim, err := sluice.New(sluice.Rule{Name: "b", Algorithm: alg, Limit: l, Budget: benchBudget}, sluice.WithStore(s))
	if err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context, key string) bool {
		d, err := lim.Allow(ctx, key)
		return err == nil && d.Allowed
	}
}

func usedMemory(b *testing.B, c *redis.Client) int64 {
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no used_memory in INFO memory")
	return 0
}

// benchBudget is the store budget of the benchmarks' rules: long enough
// that a loaded machine never turns a slow reply into a policy decision,
// which would measure the policy instead of the store.
const benchBudget = time.Second
