package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/backends/pgstore"
	"github.com/sluicehq/sluice/backends/redisstore"
	"github.com/sluicehq/sluice/cluster"

	"github.com/sluicehq/sluice/algorithms/catalog"
	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// openStore opens the store -backend names and appends its Close to
// closers: the embedded memory store, Redis (one server, or a Cluster
// from its seed nodes), PostgreSQL (migrated unless -postgres-migrate=false)
// or a gossip cluster node. Remote stores are not contacted here except
// for PostgreSQL's migration; /readyz reports whether they answer.
func openStore(ctx context.Context, cfg *serveConfig, log *slog.Logger, closers *[]func() error) (ratelimit.Store, error) {
	switch cfg.backend {
	case "memory":
		var opts []memstore.Option
		if cfg.memoryClock != nil {
			opts = append(opts, memstore.WithClock(cfg.memoryClock))
		}
		st, err := memstore.New(opts...)
		if err != nil {
			return nil, err
		}
		*closers = append(*closers, st.Close)
		return st, nil
	case "redis", "redis-cluster":
		if len(cfg.redisAddrs) == 0 {
			return nil, fmt.Errorf("%w: -backend %s needs -redis-addrs", errConfig, cfg.backend)
		}
		var client redis.UniversalClient
		if cfg.backend == "redis" {
			client = redis.NewClient(&redis.Options{Addr: cfg.redisAddrs[0], Username: cfg.redisUsername,
				Password: cfg.redisPassword, DB: cfg.redisDB, ContextTimeoutEnabled: true})
		} else {
			client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.redisAddrs, Username: cfg.redisUsername,
				Password: cfg.redisPassword, ContextTimeoutEnabled: true})
		}
		st, err := redisstore.New(client)
		if err != nil {
			_ = client.Close()
			return nil, fmt.Errorf("%w: %w", errConfig, err)
		}
		*closers = append(*closers, client.Close, st.Close)
		log.Info("store: redis", "addrs", []string(cfg.redisAddrs), "cluster", cfg.backend == "redis-cluster")
		return st, nil
	case "postgres":
		if cfg.postgresDSN == "" {
			return nil, fmt.Errorf("%w: -backend postgres needs -postgres-dsn", errConfig)
		}
		pool, err := pgxpool.New(ctx, cfg.postgresDSN)
		if err != nil {
			return nil, fmt.Errorf("%w: -postgres-dsn: %w", errConfig, err)
		}
		st, err := pgstore.New(pool)
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("%w: %w", errConfig, err)
		}
		*closers = append(*closers, func() error { pool.Close(); return nil }, st.Close)
		if cfg.postgresMigrate {
			mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := st.Migrate(mctx); err != nil {
				return nil, fmt.Errorf("postgres migration: %w", err)
			}
		}
		log.Info("store: postgres", "migrated", cfg.postgresMigrate)
		return st, nil
	case "cluster":
		host, port, err := hostPort(cfg.clusterBind)
		if err != nil {
			return nil, err
		}
		ccfg := cluster.DefaultLANConfig()
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
			ccfg = cluster.DefaultLocalConfig()
		}
		ccfg.BindAddr = host
		if ccfg.BindPort, err = strconv.Atoi(port); err != nil {
			return nil, fmt.Errorf("%w: -cluster-bind port %q", errConfig, port)
		}
		if cfg.clusterName != "" {
			ccfg.Name = cfg.clusterName
		} else if ccfg.Name == "" {
			ccfg.Name, _ = os.Hostname()
		}
		ccfg.Seeds = cfg.clusterSeeds
		if cfg.clusterSecret != "" {
			key, err := os.ReadFile(cfg.clusterSecret)
			if err != nil {
				return nil, fmt.Errorf("%w: -cluster-secret-file: %w", errConfig, err)
			}
			ccfg.SecretKey = bytes.TrimSpace(key)
		}
		node, err := cluster.New(ccfg)
		if err != nil {
			return nil, err
		}
		*closers = append(*closers, func() error {
			if err := node.Leave(5 * time.Second); err != nil {
				log.Warn("cluster: leave", "error", err)
			}
			return node.Close()
		})
		log.Info("store: gossip cluster", "name", ccfg.Name, "addr", node.Addr(), "seeds", []string(cfg.clusterSeeds))
		return node, nil
	}
	return nil, fmt.Errorf("%w: -backend %q: want memory, redis, redis-cluster, postgres or cluster", errConfig, cfg.backend)
}

// Readiness probe: a key no rule decides, under a limit that always
// admits (a billion per second) and whose state expires within a second.
const (
	probeNamespace = "sluice-readyz"
	probeKey       = "probe"
)

// probeLimit is the probe key's limit.
var probeLimit = ratelimit.Every(time.Second, 1_000_000_000)

// probeStore takes one unit from the probe key: an answer proves the
// store is reachable and accepts writes (PostgreSQL commits a
// transaction that updates a row, Redis runs a script that sets a key),
// which a peek would not (a PostgreSQL peek only locks and rolls back).
// Nothing is taken from a rule's key.
func probeStore(ctx context.Context, st ratelimit.Store) error {
	alg, ok := catalog.ByName("gcra")
	if !ok {
		return fmt.Errorf("no gcra algorithm")
	}
	out, err := st.Apply(ctx, ratelimit.Check{Namespace: probeNamespace, Key: probeKey, Algorithm: alg,
		Limit: probeLimit, Cost: 1})
	if err != nil {
		return err
	}
	if !out.Allowed {
		return fmt.Errorf("the probe key's take was denied: nothing was written")
	}
	return nil
}
