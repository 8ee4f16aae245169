package redisstore_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/backends/redisstore"
	"github.com/sluicehq/sluice/conformance/storetest"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// startCluster starts a one-node Redis Cluster owning every slot and
// returns a ClusterClient on it.
func startCluster(t *testing.T) (*server, *redis.ClusterClient) {
	t.Helper()
	srv := startServer(t, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(t.TempDir(), "nodes.conf"))
	admin := newClient(t, srv.addr())
	if err := admin.Do(t.Context(), "cluster", "addslotsrange", 0, 16383).Err(); err != nil {
		t.Fatalf("CLUSTER ADDSLOTSRANGE: %v", err)
	}
	waitFor(t, func() bool {
		info, err := admin.ClusterInfo(t.Context()).Result()
		return err == nil && strings.Contains(info, "cluster_state:ok")
	})
	return srv, newClusterClient(t, srv.addr())
}

// processOnly hides the type of a client, so the store cannot tell what
// it talks to.
type processOnly struct{ redisstore.Client }

// newClusterClient returns a ClusterClient configured as the store
// requires, closed when the test ends.
func newClusterClient(t *testing.T, addr string) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{addr},
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		ReadTimeout:           2 * time.Second,
		WriteTimeout:          2 * time.Second,
	})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func TestCluster(t *testing.T) {
	srv, cc := startCluster(t)
	ctx := t.Context()
	prefix := randomPrefix(t)
	st, err := redisstore.New(cc, redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	if p, err := st.EvictionPolicies(ctx); err != nil || len(p) != 1 || p[0] != "noeviction" {
		t.Fatalf("EvictionPolicies on the cluster = %q, %v; want [noeviction]", p, err)
	}
	t.Run("slots match CLUSTER KEYSLOT", func(t *testing.T) {
		admin := newClient(t, srv.addr())
		r := rand.New(rand.NewPCG(rand.Uint64(), 3))
		for i := range 200 {
			b := make([]byte, r.IntN(40))
			for j := range b {
				b[j] = byte(r.IntN(256))
			}
			if i%4 == 0 {
				b = append([]byte("x{"), append(b, '}')...)
			}
			want, err := admin.ClusterKeySlot(ctx, string(b)).Result()
			if err != nil {
				t.Fatal(err)
			}
			if got := redisstore.KeySlot(string(b)); int64(got) != want {
				t.Fatalf("slot of %q = %d, CLUSTER KEYSLOT says %d", b, got, want)
			}
		}
	})
	t.Run("every key has its tag's slot", func(t *testing.T) {
		admin := newClient(t, srv.addr())
		r := rand.New(rand.NewPCG(rand.Uint64(), 4))
		for range 100 {
			ns, key := make([]byte, r.IntN(12)), make([]byte, 1+r.IntN(40))
			const alphabet = "{}:% ab\x00\xff"
			for _, b := range [][]byte{ns, key} {
				for j := range b {
					b[j] = alphabet[r.IntN(len(alphabet))]
				}
			}
			rk := st.RedisKey(string(ns), string(key))
			tag := rk[len(prefix)+1 : len(prefix)+1+redisstore.TagLen]
			want, err := admin.ClusterKeySlot(ctx, tag).Result()
			if err != nil {
				t.Fatal(err)
			}
			if got, err := admin.ClusterKeySlot(ctx, rk).Result(); err != nil || got != want {
				t.Fatalf("CLUSTER KEYSLOT %q = %d, %v; its tag %q has slot %d", rk, got, err, tag, want)
			}
		}
	})
	t.Run("CROSSSLOT reply is ErrCrossSlot", func(t *testing.T) {
		// A client the store cannot identify, without tags: the store sends
		// the composite and the server refuses it.
		opaque, err := redisstore.New(processOnly{cc}, redisstore.WithPrefix(prefix), redisstore.WithoutHashTag())
		if err != nil {
			t.Fatal(err)
		}
		checks := []ratelimit.Check{
			{Namespace: "x", Key: "alice", Algorithm: gcra.New(), Limit: ratelimit.PerHour(2), Cost: 1},
			{Namespace: "x", Key: "bob", Algorithm: gcra.New(), Limit: ratelimit.PerHour(2), Cost: 1},
		}
		ok, err := opaque.ApplyAll(ctx, checks, make([]ratelimit.Outcome, 2))
		if ok || !errors.Is(err, redisstore.ErrCrossSlot) || !errors.Is(err, ratelimit.ErrInvalid) || !strings.Contains(err.Error(), "CROSSSLOT") {
			t.Fatalf("composite across slots through an opaque client: %v %v, want ErrCrossSlot (ErrInvalid) from the CROSSSLOT reply", ok, err)
		}
	})
	for _, alg := range testAlgorithms() {
		t.Run("algo="+alg.Name(), func(t *testing.T) {
			lim := ratelimit.PerHour(2)
			single := ratelimit.Check{Namespace: alg.Name(), Key: "plain key", Algorithm: alg, Limit: lim, Cost: 1}
			for i, want := range []bool{true, true, false} {
				o, err := st.Apply(ctx, single)
				if err != nil || o.Allowed != want {
					t.Fatalf("single check %d: %+v %v", i, o, err)
				}
			}
			// Same key under two rules: DefaultTag ignores the namespace.
			sameKey := []ratelimit.Check{
				{Namespace: alg.Name() + "/minute", Key: "user7", Algorithm: alg, Limit: lim, Cost: 1},
				{Namespace: alg.Name() + "/day", Key: "user7", Algorithm: alg, Limit: lim, Cost: 1},
			}
			// Explicit tag shared by different keys.
			tagged := []ratelimit.Check{
				{Namespace: alg.Name(), Key: "{tenant1}:ip:10.0.0.1", Algorithm: alg, Limit: lim, Cost: 1},
				{Namespace: alg.Name(), Key: "{tenant1}:user:42", Algorithm: alg, Limit: lim, Cost: 1},
				{Namespace: alg.Name(), Key: "{tenant1}:global", Algorithm: alg, Limit: lim, Cost: 1},
			}
			out := make([]ratelimit.Outcome, 3)
			for _, checks := range [][]ratelimit.Check{sameKey, tagged} {
				ok, err := st.ApplyAll(ctx, checks, out)
				if err != nil || !ok {
					t.Fatalf("composite in one slot: %v %v", ok, err)
				}
			}
			across := []ratelimit.Check{
				{Namespace: alg.Name(), Key: "alice", Algorithm: alg, Limit: lim, Cost: 1},
				{Namespace: alg.Name(), Key: "bob", Algorithm: alg, Limit: lim, Cost: 1},
			}
			ok, err := st.ApplyAll(ctx, across, out)
			if !errors.Is(err, redisstore.ErrCrossSlot) || ok {
				t.Fatalf("composite across slots: %v %v, want redisstore.ErrCrossSlot", ok, err)
			}
			if strings.Contains(err.Error(), "CROSSSLOT") {
				t.Fatalf("raw server error leaked: %v", err)
			}
		})
	}
}

// TestClusterStoretest runs the conformance suite through ClusterClients,
// directly and through their autopipeliner. Its composites use untagged
// keys, so the harness gives every key one hash tag (WithHashTag): the
// suite exercises Cluster routing, while TestCluster covers tags and
// cross-slot refusal.
func TestClusterStoretest(t *testing.T) {
	srv, _ := startCluster(t)
	for _, mode := range clientModes()[:3] {
		t.Run("client="+mode.name, func(t *testing.T) {
			prefix := randomPrefix(t)
			opts := []redisstore.Option{redisstore.WithPrefix(prefix), redisstore.WithCASAttempts(1000),
				redisstore.WithHashTag(func(string, string) string { return "suite" })}
			opts = append(opts, mode.opts...)
			storetest.Run(t, storetest.Harness{Algorithms: testAlgorithms(), NewStore: func(t *testing.T) ratelimit.Store {
				st, err := redisstore.New(newClusterClient(t, srv.addr()), opts...)
				if err != nil {
					t.Fatal(err)
				}
				return st
			}})
		})
	}
}

// TestClusterLostReplyNoDoubleSpend drops a script's reply between a
// ClusterClient (default MaxRedirects, which also governs its retries)
// and a one-node cluster, directly and through the autopipeliner:
// ErrUnknownOutcome and exactly one spend.
func TestClusterLostReplyNoDoubleSpend(t *testing.T) {
	srv, _ := startCluster(t)
	for _, mode := range clientModes()[:3] {
		t.Run("client="+mode.name, func(t *testing.T) {
			proxy := newDropProxy(t, srv.addr())
			viaProxy := redis.NewClusterClient(&redis.ClusterOptions{
				ContextTimeoutEnabled: true,
				ReadTimeout:           2 * time.Second,
				// Route every slot through the proxy instead of the address
				// the node announces.
				ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
					return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: proxy.addr()}}}}, nil
				},
			})
			t.Cleanup(func() { _ = viaProxy.Close() })
			prefix := randomPrefix(t)
			st, err := redisstore.New(viaProxy, append(mode.opts, redisstore.WithPrefix(prefix))...)
			if err != nil {
				t.Fatal(err)
			}
			direct, err := redisstore.New(newClusterClient(t, srv.addr()), redisstore.WithPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			check := ratelimit.Check{Namespace: "l", Key: "k", Algorithm: gcra.New(), Limit: ratelimit.PerHour(10), Cost: 1}
			if o, err := st.Apply(t.Context(), check); err != nil || o.Remaining != 9 {
				t.Fatalf("warm-up: %+v %v", o, err)
			}
			proxy.armed.Store(true)
			if _, err := st.Apply(t.Context(), check); !errors.Is(err, ratelimit.ErrUnknownOutcome) {
				t.Fatalf("lost reply: %v, want ErrUnknownOutcome", err)
			}
			peek := check
			peek.Cost = 0
			o, err := direct.Apply(t.Context(), peek)
			if err != nil {
				t.Fatal(err)
			}
			if o.Remaining != 8 {
				t.Fatalf("remaining %d after one lost reply, want 8: the script ran %d times", o.Remaining, 9-o.Remaining)
			}
		})
	}
}
