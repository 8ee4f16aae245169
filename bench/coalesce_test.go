package bench

import (
	"context"
	"fmt"
	"testing"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/backends/redisstore"
)

// BenchmarkRedisCoalesce compares the store's coalescer (its default)
// with its plain path (one script call per decision) and with redis_rate,
// all on the same go-redis client, and redis_rate on that client's
// autopipeliner, at concurrency 1, 8 and 64, on one hot key and on random
// keys out of a million. Time per call is the inverse of throughput.
func BenchmarkRedisCoalesce(b *testing.B) {
	c := redisClient(b)
	keys := makeKeys(1_000_000)
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
					runConcurrent(b, conc, take, keyChooser("bench:", ks == "1", keys))
				})
			}
		}
	}
}

// redisRateAP is redis_rate on the client's asynchronous autopipeliner,
// go-redis's own batching.
func redisRateAP(b *testing.B, c *redis.Client) taker {
	ap, err := c.AsyncAutoPipeline()
	if err != nil {
		b.Fatal(err)
	}
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
