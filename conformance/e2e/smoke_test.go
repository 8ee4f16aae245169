package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/conformance/e2e/testenv"
)

// TestSmokeRedis proves the shared Redis answers through testenv and
// cannot be stopped (stopping and restarting private servers is checked by
// the store tests' store-down checks).
func TestSmokeRedis(t *testing.T) {
	srv := testenv.Redis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	defer c.Close()
	ctx := t.Context()
	if got, err := c.Ping(ctx).Result(); err != nil || got != "PONG" {
		t.Fatalf("PING: %q, %v", got, err)
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		t.Fatalf("INFO: %v", err)
	}
	t.Logf("redis %s via %s: %s", srv.Addr(), srv.Source, field(info, "redis_version"))
	if srv.CanStop() {
		t.Fatal("the shared server reports CanStop")
	}
}

// TestSmokeRedisCluster proves the shared Redis Cluster serves every slot
// and cannot be stopped.
func TestSmokeRedisCluster(t *testing.T) {
	srv := testenv.RedisCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: srv.Addrs, MaxRetries: -1})
	defer c.Close()
	ctx := t.Context()
	info, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		t.Fatalf("CLUSTER INFO: %v", err)
	}
	if field(info, "cluster_state") != "ok" {
		t.Fatalf("cluster_state = %q, want ok", field(info, "cluster_state"))
	}
	// Keys in many slots all work through the cluster client.
	for _, k := range []string{"a", "b", "{user}1", "{user}2", "zz"} {
		if err := c.Set(ctx, "smoke:"+k, 1, time.Minute).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	t.Logf("redis cluster %v via %s: ok", srv.Addrs, srv.Source)
	if srv.CanStop() {
		t.Fatal("the shared server reports CanStop")
	}
}

// TestSmokePostgres proves the shared PostgreSQL answers through testenv
// and cannot be stopped.
func TestSmokePostgres(t *testing.T) {
	srv := testenv.Postgres(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, srv.DSN)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	var one int
	var version string
	if err := conn.QueryRow(ctx, "SELECT 1, version()").Scan(&one, &version); err != nil || one != 1 {
		t.Fatalf("SELECT 1: %d, %v", one, err)
	}
	t.Logf("postgres %s via %s: %s", srv.Addr(), srv.Source, version)
	if srv.CanStop() {
		t.Fatal("the shared server reports CanStop")
	}
}

// field returns the value of name in an INFO-style "name:value" text.
func field(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}
