package bench

import (
	"fmt"
	"testing"

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
