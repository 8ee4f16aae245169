package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/backends/redisstore"
	"github.com/sluicehq/sluice/internal/cputime"
)

// BenchmarkRedisCoalesce compares the store's coalescer (its default)
// with its plain path (one script call per decision) and with redis_rate,
// all on the same go-redis client, and redis_rate on that client's
// autopipeliner, at concurrency 1, 8 and 64, on one hot key and on random
// keys out of a million. Time per call is the inverse of throughput.
// Beside it, as the machine is shared and noisy, each reports the CPU time
// per call of this process (cpu-ns/op) and of the server
// (redis-cpu-ns/op), and the scripts per call (scripts/op: one over the
// mean batch size for the coalescer).
func BenchmarkRedisCoalesce(b *testing.B) {
	c := redisClient(b)
	impls := []redisImpl{
		{"sluice-gcra", sluiceRedis(gcra.New())},
		{"sluice-gcra-plain", sluiceRedis(gcra.New(), redisstore.WithoutCoalescing())},
		{"redis_rate", redisRate},
		{"redis_rate-ap", redisRateAP},
	}
	for _, ks := range []string{"1", "1M"} {
		for _, conc := range []int{1, 8, 64} {
			for _, im := range impls {
				take := im.make(b, c)
				b.Run(fmt.Sprintf("keys=%s/conc=%d/impl=%s", ks, conc, im.name), func(b *testing.B) {
					before := serverCounters(b, c)
					cpu0 := cputime.Process()
					runConcurrent(b, conc, take, keyChooser("bench:", ks == "1", 1_000_000))
					cpu := cputime.Process() - cpu0
					after := serverCounters(b, c)
					n := float64(b.N)
					b.ReportMetric(float64(cpu)/n, "cpu-ns/op")
					b.ReportMetric(float64(after.cpu-before.cpu)/n, "redis-cpu-ns/op")
					b.ReportMetric(float64(after.scripts-before.scripts)/n, "scripts/op")
				})
			}
		}
	}
}

// counters are a Redis server's CPU time (user + system) and the number
// of scripts it ran (EVALSHA and EVAL calls).
type counters struct {
	cpu     time.Duration
	scripts int64
}

// serverCounters reads counters from INFO cpu and INFO commandstats.
func serverCounters(b *testing.B, c *redis.Client) counters {
	info, err := c.Info(context.Background(), "cpu", "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var r counters
	for line := range strings.SplitSeq(info, "\r\n") {
		name, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch name {
		case "used_cpu_sys", "used_cpu_user":
			sec, err := strconv.ParseFloat(val, 64)
			if err != nil {
				b.Fatalf("INFO %s: %v", name, err)
			}
			r.cpu += time.Duration(sec * float64(time.Second))
		case "cmdstat_evalsha", "cmdstat_eval":
			calls, _, _ := strings.Cut(strings.TrimPrefix(val, "calls="), ",")
			n, err := strconv.ParseInt(calls, 10, 64)
			if err != nil {
				b.Fatalf("INFO %s: %v", name, err)
			}
			r.scripts += n
		}
	}
	return r
}
