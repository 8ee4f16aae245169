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
func redisPrefix(t *testing.T) string { return uniqueName(t, "e2e") + ":" }

// uniqueName returns prefix followed by 12 random hex digits: a key
// prefix or a table of one test's own.
func uniqueName(t *testing.T, prefix string) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return prefix + hex.EncodeToString(b[:])
}

// newRedisStore returns a redisstore with its own client (a separate pod)
// on the standalone Redis srv, under prefix, and that client.
func newRedisStore(t testing.TB, srv *testenv.Server, prefix string) (*redisstore.Store, *redis.Client) {
	t.Helper()
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
	return st, c
}

// TestRedisStore runs the conformance suite on redisstore against a
// standalone Redis private to the test, each store with its own client (a
// separate pod). The server is private so that the store-down checks,
// which kill and restart it, disturb no other test.
func TestRedisStore(t *testing.T) {
	srv := testenv.NewRedis(t)
	prefix := redisPrefix(t)
	storetest.Run(t, privateHarness(srv, func(t *testing.T) ratelimit.Store {
		st, _ := newRedisStore(t, srv, prefix)
		return st
	}))
}

// TestRedisClusterStore runs the conformance suite on redisstore through
// ClusterClients against a one-node Redis Cluster private to the test,
// which the store-down checks kill and restart. The suite's composites use
// keys without hash tags, so the harness gives every key one tag
// (WithHashTag); redisstore's own tests cover tags and the cross-slot
// refusal.
func TestRedisClusterStore(t *testing.T) {
	srv := testenv.NewRedisCluster(t)
	prefix := redisPrefix(t)
	storetest.Run(t, privateHarness(srv, func(t *testing.T) ratelimit.Store {
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
	}))
}
