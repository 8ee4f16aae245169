package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/backends/redisstore"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// ExampleNew configures a go-redis client the way the store needs and
// applies one check. It needs a Redis on localhost, so it claims no output.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{
		Addr:                  "127.0.0.1:6379",
		ContextTimeoutEnabled: true, // deadlines bound every socket read and write
		MaxRetries:            -1,
	})
	defer rdb.Close()
	store, err := redisstore.New(rdb, redisstore.WithPrefix("myapp:"), redisstore.WithEvictionCheck(log.Printf))
	if err != nil {
		log.Print(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	o, err := store.Apply(ctx, ratelimit.Check{
		Namespace: "login",
		Key:       "user:42",
		Algorithm: gcra.New(),
		Limit:     ratelimit.PerMinute(10),
		Cost:      1,
	})
	if err != nil {
		// errors.Is(err, ratelimit.ErrUnknownOutcome): the call may have
		// been applied; ratelimit.ErrUnavailable: it certainly was not.
		log.Print(err)
		return
	}
	fmt.Println(o.Allowed, o.Remaining)
}

// ExampleStore_ApplyAll checks three rules of one user in one script call.
// On Redis Cluster the keys share a slot through the "{user:42}" tag.
func ExampleStore_ApplyAll() {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{"127.0.0.1:7000"},
		ContextTimeoutEnabled: true,
	})
	defer rdb.Close()
	store, err := redisstore.New(rdb)
	if err != nil {
		log.Print(err)
		return
	}
	alg := gcra.New()
	checks := []ratelimit.Check{
		{Namespace: "per-second", Key: "{user:42}", Algorithm: alg, Limit: ratelimit.PerSecond(5), Cost: 1},
		{Namespace: "per-hour", Key: "{user:42}", Algorithm: alg, Limit: ratelimit.PerHour(1000), Cost: 1},
		{Namespace: "uploads", Key: "{user:42}:uploads", Algorithm: alg, Limit: ratelimit.PerMinute(3), Cost: 1},
	}
	out := make([]ratelimit.Outcome, len(checks))
	allowed, err := store.ApplyAll(context.Background(), checks, out)
	if err != nil {
		log.Print(err)
		return
	}
	fmt.Println(allowed)
}
