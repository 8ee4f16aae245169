package cluster

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/core/ratelimit"
)

func TestJoinSyncAndCharge(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	lim := ratelimit.Limit{Count: 1, Period: time.Hour, Burst: 30}
	c := ratelimit.Check{Namespace: "ns", Key: newKey(t), Algorithm: tokenbucket.New(), Limit: lim, Cost: 1}
	// Node 0 takes 10; after a sync every node's copy shows 20 left.
	for range 10 {
		if o := take(t, nodes[0], c); !o.Allowed {
			t.Fatalf("take denied: %+v", o)
		}
	}
	peek := c
	peek.Cost = 0
	waitFor(t, 3*time.Second, func() string {
		for _, n := range nodes {
			if o := take(t, n, peek); o.Remaining != 20 {
				t.Logf("%s stats %+v", n.Name(), n.Stats())
				return n.Name() + " remaining " + itoa(o.Remaining) + ", want 20"
			}
		}
		return ""
	})
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func TestUnsupported(t *testing.T) {
	nodes := startCluster(t, 1, nil)
	ctx := context.Background()
	lim := ratelimit.PerSecond(10)
	_, err := nodes[0].Apply(ctx, ratelimit.Check{Key: "k", Algorithm: plainAlg{}, Limit: lim, Cost: 1})
	if !errors.Is(err, ratelimit.ErrUnsupported) {
		t.Fatalf("plain algorithm: err %v, want ErrUnsupported", err)
	}
	_, err = nodes[0].Apply(ctx, ratelimit.Check{Key: "k", Algorithm: tokenbucket.New(), Limit: lim, Cost: 1, Op: ratelimit.OpRefund})
	if !errors.Is(err, ratelimit.ErrUnsupported) {
		t.Fatalf("refund: err %v, want ErrUnsupported", err)
	}
}
