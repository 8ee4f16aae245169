package redisstore_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/backends/redisstore"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// countHook counts the scripts (EVALSHA, EVAL) a client sends alone and
// in pipelines; go-redis's own handshake commands are left out.
type countHook struct{ single, piped atomic.Int64 }

func isScript(cmd redis.Cmder) bool {
	n := cmd.Name()
	return n == "evalsha" || n == "eval"
}

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd) {
			h.single.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if isScript(cmd) {
				h.piped.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

var _ redis.Hook = (*countHook)(nil)

// mainPoolGets is how many times c took a connection from its main pool
// (the one plain commands use, not the pipeline pool).
func mainPoolGets(c *redis.Client) int64 {
	st := c.PoolStats()
	return int64(st.Hits) + int64(st.Misses)
}

// TestAutoPipelineAdaptiveConcurrentSafe checks where WithAutoPipeline
// sends commands, and that the admission count is exact either way: 8
// concurrent callers go straight to the client, 64 concurrent callers
// through the autopipeliner; one caller at a time goes to the client under
// half duplex and through the autopipeliner under full duplex (the
// default), taking no connection from the client's main pool.
func TestAutoPipelineAdaptiveConcurrentSafe(t *testing.T) {
	tests := []struct {
		name string
		opts *redis.AutoPipelineOptions
		full bool
	}{
		{"half-duplex", redis.DefaultAutoPipelineOptions(), false},
		{"full-duplex-default", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startServer(t)
			c := newClient(t, srv.addr())
			h := &countHook{}
			c.AddHook(h)
			st, err := redisstore.New(c, redisstore.WithPrefix(randomPrefix(t)), redisstore.WithAutoPipeline(tt.opts), redisstore.WithoutCoalescing())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			check := ratelimit.Check{Namespace: "a", Key: "k", Algorithm: gcra.New(), Limit: ratelimit.Limit{Count: 2000, Period: 24 * time.Hour, Burst: 2000}, Cost: 1}
			gets := mainPoolGets(c)
			for range 50 {
				if _, err := st.Apply(t.Context(), check); err != nil {
					t.Fatal(err)
				}
			}
			single := h.single.Load()
			switch p, g := h.piped.Load(), mainPoolGets(c)-gets; {
			case single < 50:
				t.Fatalf("one caller: the hook saw %d scripts, want 50 or more", single)
			case !tt.full && p != 0:
				t.Fatalf("one caller: %d scripts in pipelines, want 0", p)
			case tt.full && g != 0:
				// Full duplex runs process hooks per command, so the hook
				// cannot tell; the pool can.
				t.Fatalf("one caller, full duplex: %d connections taken from the main pool, want 0 (every script on the autopipeliner's)", g)
			}
			gets = mainPoolGets(c)
			// Up to the threshold of calls in flight, half duplex pipelines
			// nothing.
			var few sync.WaitGroup
			for range 8 {
				few.Go(func() {
					for range 20 {
						if _, err := st.Apply(t.Context(), check); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			few.Wait()
			switch p, g := h.piped.Load(), mainPoolGets(c)-gets; {
			case !tt.full && p != 0:
				t.Fatalf("8 concurrent callers: %d scripts in pipelines, want 0 (at most 16 in flight go to the client)", p)
			case tt.full && g == 0:
				t.Fatal("8 concurrent callers, full duplex: no script went to the client directly")
			}
			single, gets = h.single.Load(), mainPoolGets(c)
			const callers, each = 64, 50
			var (
				wg      sync.WaitGroup
				allowed atomic.Int64
				errs    atomic.Int64
			)
			for range callers {
				wg.Go(func() {
					for range each {
						o, err := st.Apply(t.Context(), check)
						switch {
						case err != nil:
							if errs.Add(1) == 1 {
								t.Log(err)
							}
						case o.Allowed:
							allowed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if errs.Load() != 0 {
				t.Fatalf("%d calls failed", errs.Load())
			}
			// 2000 burst, 50 + 160 spent above, 3200 asked, one token per
			// 43 s: exactly 1790 more pass.
			if got := allowed.Load(); got != 1790 {
				t.Fatalf("%d of %d concurrent calls allowed, want 1790", got, callers*each)
			}
			g := mainPoolGets(c) - gets
			if !tt.full && h.piped.Load() == 0 || tt.full && g >= callers*each {
				t.Fatalf("%d concurrent callers: no command went through the autopipeliner (%d connections taken from the main pool)", callers, g)
			}
			t.Logf("concurrent phase: %d scripts alone, %d in pipelines (hook counts), %d on the main pool", h.single.Load()-single, h.piped.Load(), g)
		})
	}
}

// TestAsyncAutoPipelinerClient passes go-redis's asynchronous
// autopipeliner to New: the store cannot tell what server is behind it,
// so keys are tagged and a composite across slots is refused, unless
// WithoutHashTag says it is one server; decisions are the same either way,
// and EvictionPolicies reads the policy through it.
func TestAsyncAutoPipelinerClient(t *testing.T) {
	srv := startServer(t)
	ap, err := newClient(t, srv.addr()).AsyncAutoPipeline()
	if err != nil {
		t.Fatal(err)
	}
	lim := ratelimit.PerHour(2)
	checks := []ratelimit.Check{
		{Namespace: "a", Key: "u1", Algorithm: gcra.New(), Limit: lim, Cost: 1},
		{Namespace: "a", Key: "u2", Algorithm: gcra.New(), Limit: lim, Cost: 1},
	}
	tests := []struct {
		name      string
		opts      []redisstore.Option
		crossSlot bool
	}{
		{"tagged", nil, true},
		{"WithoutHashTag", []redisstore.Option{redisstore.WithoutHashTag()}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := redisstore.New(ap, append(tt.opts, redisstore.WithPrefix(randomPrefix(t)))...)
			if err != nil {
				t.Fatal(err)
			}
			if p, err := st.EvictionPolicies(t.Context()); err != nil || len(p) != 1 || p[0] != "noeviction" {
				t.Fatalf("EvictionPolicies = %q, %v; want [noeviction]", p, err)
			}
			for i, want := range []bool{true, true, false} {
				o, err := st.Apply(t.Context(), checks[0])
				if err != nil || o.Allowed != want {
					t.Fatalf("take %d: %+v %v, want allowed %v", i, o, err, want)
				}
			}
			out := make([]ratelimit.Outcome, 2)
			ok, err := st.ApplyAll(t.Context(), checks, out)
			switch {
			case tt.crossSlot:
				if !errors.Is(err, redisstore.ErrCrossSlot) {
					t.Fatalf("composite across slots: %v, want redisstore.ErrCrossSlot", err)
				}
			case err != nil:
				t.Fatal(err)
			case ok || out[0].Allowed || !out[1].Allowed:
				// u1 is spent, so nothing is consumed on u2 either.
				t.Fatalf("composite: %v %+v, want denied by u1 only", ok, out)
			}
		})
	}
}
