// Command cluster runs three gossip-synced rate-limiter nodes on loopback
// ports in one process, drives load on each, and prints a live table of
// what each node admitted, the total, and the exact limit the total must
// track: B + r·t for one global limit of r per second and burst B. How
// far the total may stray from it is the bound package cluster states
// (derived in docs/cluster.md).
//
//	go run ./cluster
//
// It exits by itself after about 10 seconds (-duration changes that).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/core/ratelimit"
)

func main() {
	var (
		duration = flag.Duration("duration", 10*time.Second, "how long to run")
		rate     = flag.Int64("rate", 100, "global limit: units per second")
		burst    = flag.Int64("burst", 100, "global limit: burst")
	)
	flag.Parse()
	if err := run(*duration, ratelimit.Limit{Count: *rate, Period: time.Second, Burst: *burst}); err != nil {
		log.Fatal(err)
	}
}

// offered is the load each node gets, in requests per second: uneven, so
// the table shows the nodes sharing one limit rather than splitting it.
var offered = []float64{150, 90, 60}

func run(d time.Duration, lim ratelimit.Limit) error {
	if err := lim.Validate(); err != nil {
		return err
	}
	nodes := make([]*cluster.Node, 0, len(offered))
	defer func() {
		for _, n := range nodes {
			_ = n.Leave(time.Second)
			_ = n.Close()
		}
	}()
	for i := range offered {
		cfg := cluster.DefaultLocalConfig()
		cfg.Name = fmt.Sprintf("node-%d", i)
		cfg.Label = "sluice-example"
		if i > 0 {
			cfg.Seeds = []string{nodes[0].Addr()}
		}
		n, err := cluster.New(cfg)
		if err != nil {
			return fmt.Errorf("start node %d: %w", i, err)
		}
		nodes = append(nodes, n)
		fmt.Printf("%s listening on %s\n", cfg.Name, n.Addr())
	}

	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	admitted := make([]atomic.Int64, len(nodes))
	start := time.Now()
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { drive(ctx, n, lim, offered[i], &admitted[i]) })
	}

	fmt.Printf("\none limit of %s shared by %d nodes, offered %v req/s\n\n", lim, len(nodes), offered)
	fmt.Printf("%6s  %8s %8s %8s  %8s  %8s  %7s\n", "t", "node-0", "node-1", "node-2", "total", "exact", "drift")
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
			wg.Wait()
		case <-tick.C:
		}
		t := time.Since(start)
		if done {
			t = min(t, d)
		}
		var total int64
		row := make([]int64, len(nodes))
		for i := range admitted {
			row[i] = admitted[i].Load()
			total += row[i]
		}
		exact := lim.Burst + lim.Count*int64(t)/int64(lim.Period)
		label := fmt.Sprintf("%5.1fs", t.Seconds())
		if done {
			label = "   end"
		}
		fmt.Printf("%s  %8d %8d %8d  %8d  %8d  %+6.2f%%\n", label, row[0], row[1], row[2], total, exact, 100*float64(total-exact)/float64(exact))
	}
	return nil
}

// drive offers rate requests per second to n until ctx ends, counting the
// admitted ones.
func drive(ctx context.Context, n *cluster.Node, lim ratelimit.Limit, rate float64, admitted *atomic.Int64) {
	c := ratelimit.Check{Namespace: "example", Key: "global", Algorithm: tokenbucket.New(), Limit: lim, Cost: 1}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	last, credit := time.Now(), 0.0
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			credit += rate * now.Sub(last).Seconds()
			last = now
			for ; credit >= 1; credit-- {
				o, err := n.Apply(ctx, c)
				if err != nil {
					if ctx.Err() == nil {
						fmt.Fprintln(os.Stderr, "apply:", err)
					}
					return
				}
				if o.Allowed {
					admitted.Add(1)
				}
			}
		}
	}
}
