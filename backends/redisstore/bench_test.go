package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/algorithms/fixedwindow"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/algorithms/leakybucket"
	"github.com/sluicehq/sluice/algorithms/slidinglog"
	"github.com/sluicehq/sluice/algorithms/slidingwindow"
	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/backends/redisstore"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// BenchmarkApply measures one decision on one hot key against a local
// redis-server, one caller at a time (conc=1) and from 64 goroutines
// (conc=64): the native script for each algorithm it covers, the generic
// path (read + compare-and-set), the autopipeliner and a three-rule
// composite in one script.
func BenchmarkApply(b *testing.B) {
	srv := startServer(b)
	lim := ratelimit.PerSecond(1_000_000) // every call allowed; Lua products stay in the fast range
	cases := []struct {
		name   string
		opts   []redisstore.Option
		checks []ratelimit.Check
	}{
		{"algo=gcra", nil, []ratelimit.Check{{Namespace: "b", Key: "hot", Algorithm: gcra.New(), Limit: lim, Cost: 1}}},
		{"algo=tokenbucket", nil, []ratelimit.Check{{Namespace: "b", Key: "hot", Algorithm: tokenbucket.New(), Limit: lim, Cost: 1}}},
		{"algo=leakybucket", nil, []ratelimit.Check{{Namespace: "b", Key: "hot", Algorithm: leakybucket.New(), Limit: lim, Cost: 1}}},
		{"algo=fixedwindow", nil, []ratelimit.Check{{Namespace: "b", Key: "hot", Algorithm: fixedwindow.New(), Limit: lim, Cost: 1}}},
		{"algo=slidingwindow", nil, []ratelimit.Check{{Namespace: "b", Key: "hot", Algorithm: slidingwindow.New(), Limit: lim, Cost: 1}}},
		// The sliding log's state grows with the calls in the last Period:
		// a quota of 100 per second keeps it short (the benchmark calls are
		// mostly denied once it is used up).
		{"algo=slidinglog", nil, []ratelimit.Check{{Namespace: "b", Key: "hot", Algorithm: slidinglog.New(), Limit: ratelimit.PerSecond(100), Cost: 1}}},
		{"op=reserve/algo=gcra", nil, []ratelimit.Check{{Namespace: "b", Key: "hot", Algorithm: gcra.New(), Limit: lim, Cost: 1, Op: ratelimit.OpReserve, MaxWait: time.Second}}},
		{"path=generic/algo=gcra", []redisstore.Option{redisstore.WithoutNativeScripts(), redisstore.WithCASAttempts(1000)},
			[]ratelimit.Check{{Namespace: "g", Key: "hot", Algorithm: gcra.New(), Limit: lim, Cost: 1}}},
		// Through go-redis's autopipeliner: only under concurrency
		// (WithAutoPipeline) and for every call, so conc=1 shows the
		// hand-off the first avoids.
		{"client=autopipeline/algo=gcra", []redisstore.Option{redisstore.WithAutoPipeline(nil)},
			[]ratelimit.Check{{Namespace: "b", Key: "hot", Algorithm: gcra.New(), Limit: lim, Cost: 1}}},
		{"client=autopipeline-always/algo=gcra", []redisstore.Option{redisstore.WithAutoPipelineAlways()},
			[]ratelimit.Check{{Namespace: "b", Key: "hot", Algorithm: gcra.New(), Limit: lim, Cost: 1}}},
		{"composite=3/algo=gcra", nil, []ratelimit.Check{
			{Namespace: "ip", Key: "{u1}10.0.0.1", Algorithm: gcra.New(), Limit: lim, Cost: 1},
			{Namespace: "user", Key: "{u1}", Algorithm: gcra.New(), Limit: lim, Cost: 1},
			{Namespace: "global", Key: "{u1}all", Algorithm: gcra.New(), Limit: lim, Cost: 1},
		}},
	}
	for _, tc := range cases {
		for _, conc := range []int{1, 64} {
			b.Run(fmt.Sprintf("backend=redis/%s/conc=%d", tc.name, conc), func(b *testing.B) {
				c := newClient(b, srv.addr(), func(o *redis.Options) { o.PoolSize = max(conc, 10) })
				st, err := redisstore.New(c, append([]redisstore.Option{redisstore.WithPrefix(randomPrefix(b))}, tc.opts...)...)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				if conc == 1 {
					out := make([]ratelimit.Outcome, len(tc.checks))
					for b.Loop() {
						if err := apply(b, st, tc.checks, out); err != nil {
							b.Fatal(err)
						}
					}
					return
				}
				b.SetParallelism((conc + 1) / 2) // GOMAXPROCS is 2 here
				b.RunParallel(func(pb *testing.PB) {
					out := make([]ratelimit.Outcome, len(tc.checks))
					for pb.Next() {
						if err := apply(b, st, tc.checks, out); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

func apply(b *testing.B, st *redisstore.Store, checks []ratelimit.Check, out []ratelimit.Outcome) error {
	if len(checks) == 1 {
		_, err := st.Apply(b.Context(), checks[0])
		return err
	}
	_, err := st.ApplyAll(b.Context(), checks, out)
	return err
}
