package e2e

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/backends/redisstore"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/tier"
)

// startThreeMasterCluster starts three redis-server child processes as a
// Redis Cluster of three masters owning the default contiguous slot
// ranges, and returns their addresses. They are killed when t ends.
func startThreeMasterCluster(t *testing.T) []string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server not found and CI=true: %v", err)
		}
		t.Skipf("redis-server not found: %v", err)
	}
	ranges := [3][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	addrs := make([]string, 3)
	clients := make([]*redis.Client, 3)
	for i := range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		dir := t.TempDir()
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-announce-ip", "127.0.0.1", "--loglevel", "warning", "--logfile", dir+"/redis.log")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		addrs[i] = "127.0.0.1:" + strconv.Itoa(port)
		clients[i] = redis.NewClient(&redis.Options{Addr: addrs[i], MaxRetries: -1})
		t.Cleanup(func() { _ = clients[i].Close() })
	}
	ctx := t.Context()
	waitFor := func(what string, ok func() bool) {
		deadline := time.Now().Add(20 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("three-master cluster: %s", what)
			}
			time.Sleep(20 * time.Millisecond) // polling a starting server: no event to wait on
		}
	}
	for i, c := range clients {
		waitFor("node "+addrs[i]+" never answered", func() bool { return c.Ping(ctx).Err() == nil })
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", ranges[i][0], ranges[i][1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i < 3; i++ {
		host, port, _ := net.SplitHostPort(addrs[i])
		if err := clients[0].ClusterMeet(ctx, host, port).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range clients {
		waitFor("cluster_state never ok", func() bool {
			info, err := c.ClusterInfo(ctx).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3")
		})
	}
	return addrs
}

// TestTierShardedCluster spreads one hot key over 8 sub-keys on a
// 3-master Redis Cluster from 16 callers: the sub-keys land on every
// master (3, 3 and 2 of them), the masters' command counts follow, and
// the key admits what one bucket would.
func TestTierShardedCluster(t *testing.T) {
	if tierRaceEnabled {
		t.Skip("a timing measurement: skipped under -race (.ci/run runs it without)")
	}
	addrs := startThreeMasterCluster(t)
	masters := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		masters[i] = redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { _ = masters[i].Close() })
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 64})
	t.Cleanup(func() { _ = cc.Close() })
	rs, err := redisstore.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	const shards = 8
	st, err := tier.New(rs, tier.WithRule("hot", tier.Rule{Mode: tier.Lease, Shards: shards}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	limit := ratelimit.Limit{Count: 2000, Period: time.Second, Burst: 2000}
	before := make([]int64, len(masters))
	for i, m := range masters {
		before[i] = redisCommands(t, m)
	}
	d := 3 * time.Second
	var admitted, errs, calls atomic.Int64
	var (
		mu     sync.Mutex
		offers []time.Duration
	)
	start := time.Now()
	var wg sync.WaitGroup
	// 16 callers offering 400 requests per second each, 3.2 times the
	// rate: paced, so that they do not starve the three redis-server
	// processes of this 2-core machine's CPU.
	for range 16 {
		wg.Go(func() {
			c := ratelimit.Check{Namespace: "hot", Key: "hot", Algorithm: gcra.New(), Limit: limit, Cost: 1}
			tick := time.NewTicker(2500 * time.Microsecond)
			defer tick.Stop()
			var own []time.Duration
			for time.Since(start) < d {
				<-tick.C
				at := time.Since(start)
				o, err := st.Apply(context.Background(), c)
				calls.Add(1)
				switch {
				case err != nil:
					errs.Add(1)
					continue
				case o.Allowed:
					admitted.Add(1)
				}
				own = append(own, at)
			}
			mu.Lock()
			offers = append(offers, own...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	perMaster := make([]int64, len(masters))
	keysPer := make([]int64, len(masters))
	for i, m := range masters {
		perMaster[i] = redisCommands(t, m) - before[i]
		n, err := m.DBSize(t.Context()).Result()
		if err != nil {
			t.Fatal(err)
		}
		keysPer[i] = n
	}
	exact := float64(model.ExactAdmits(limit, offers))
	t.Logf("%d calls in %s, admitted %d, exact %.0f (%+.2f%%), errors %d", calls.Load(), elapsed, admitted.Load(), exact,
		100*(float64(admitted.Load())-exact)/exact, errs.Load())
	t.Logf("keys per master %v, commands per master %v", keysPer, perMaster)
	if errs.Load() > 0 {
		t.Errorf("%d calls failed", errs.Load())
	}
	// Every admission is a take on a sub-key whose shares sum to the
	// limit, so never more than one bucket; under-admission is what leases
	// and shares hold when the run stops (docs/tier.md).
	if a := float64(admitted.Load()); a > exact*1.01 || a < exact*0.98 {
		t.Errorf("admitted %d, want within [-2%%, +1%%] of the exact %.0f", admitted.Load(), exact)
	}
	var total int64
	for i, k := range keysPer {
		if k == 0 {
			t.Errorf("master %s holds no sub-key", addrs[i])
		}
		total += k
	}
	if total != shards {
		t.Errorf("%d keys on the cluster, want the %d sub-keys", total, shards)
	}
	// The sub-keys' slots, as Redis computes them: one in each eighth.
	var eighths [shards]int
	for _, m := range masters {
		keys, err := m.Keys(t.Context(), "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			slot, err := m.ClusterKeySlot(t.Context(), k).Result()
			if err != nil {
				t.Fatal(err)
			}
			eighths[slot*shards/16384]++
		}
	}
	t.Logf("sub-keys per eighth of the slots: %v", eighths)
	for i, n := range eighths {
		if n != 1 {
			t.Errorf("%d sub-keys in slots %d..%d, want 1", n, i*16384/shards, (i+1)*16384/shards-1)
		}
	}
	lo, hi := perMaster[0], perMaster[0]
	for _, n := range perMaster {
		lo, hi = min(lo, n), max(hi, n)
	}
	if lo == 0 || float64(hi)/float64(lo) > 2.5 {
		t.Errorf("commands per master %v: not spread", perMaster)
	}
}
