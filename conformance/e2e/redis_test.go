package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/backends/redisstore"
	"github.com/sluicehq/sluice/conformance/e2e/testenv"
	"github.com/sluicehq/sluice/conformance/storetest"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// redisPrefix returns a key prefix unique to one test, so tests share a
// server without flushing it.
func redisPrefix(t *testing.T) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "e2e" + hex.EncodeToString(b[:]) + ":"
}

// TestRedisStore runs the conformance suite on redisstore against the
// standalone Redis from testenv, each store with its own client (a
// separate pod).
//
// The store-down checks are left to backends/redisstore's own tests (which
// kill and restart a child redis-server): restarting testenv's server
// leaves its process-wait goroutine running, which the suite's leak check
// reports as a leak of the store.
func TestRedisStore(t *testing.T) {
	srv := testenv.Redis(t)
	prefix := redisPrefix(t)
	h := storetest.Harness{
		Algorithms: algorithms(),
		NewStore: func(t *testing.T) ratelimit.Store {
			c := redis.NewClient(&redis.Options{
				Addr:                  srv.Addr(),
				MaxRetries:            -1,
				ContextTimeoutEnabled: true,
				ReadTimeout:           2 * time.Second,
				WriteTimeout:          2 * time.Second,
			})
			t.Cleanup(func() { _ = c.Close() })
			st, err := redisstore.New(c, redisstore.WithPrefix(prefix), redisstore.WithCASAttempts(1000))
			if err != nil {
				t.Fatal(err)
			}
			return st
		},
	}
	storetest.Run(t, h)
}

// TestRedisClusterStore runs the conformance suite on redisstore through
// ClusterClients against the Redis Cluster from testenv. The suite's
// composites use keys without hash tags, so the harness gives every key
// one tag (WithHashTag); redisstore's own tests cover tags and the
// cross-slot refusal.
func TestRedisClusterStore(t *testing.T) {
	srv := testenv.RedisCluster(t)
	prefix := redisPrefix(t)
	storetest.Run(t, storetest.Harness{
		Algorithms: algorithms(),
		NewStore: func(t *testing.T) ratelimit.Store {
			c := redis.NewClusterClient(&redis.ClusterOptions{
				Addrs:                 srv.Addrs,
				MaxRetries:            -1,
				ContextTimeoutEnabled: true,
				ReadTimeout:           2 * time.Second,
				WriteTimeout:          2 * time.Second,
			})
			t.Cleanup(func() { _ = c.Close() })
			st, err := redisstore.New(c, redisstore.WithPrefix(prefix), redisstore.WithCASAttempts(1000),
				redisstore.WithHashTag(func(string, string) string { return "e2e" }))
			if err != nil {
				t.Fatal(err)
			}
			return st
		},
	})
}
