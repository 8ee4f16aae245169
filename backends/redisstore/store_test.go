package redisstore_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/backends/redisstore"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// newStore starts a server and returns a store on it with a random prefix.
func newStore(t *testing.T, opts ...redisstore.Option) (*redisstore.Store, *redis.Client, *server) {
	t.Helper()
	srv := startServer(t)
	c := newClient(t, srv.addr())
	st, err := redisstore.New(c, append([]redisstore.Option{redisstore.WithPrefix(randomPrefix(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st, c, srv
}

func TestNewValidates(t *testing.T) {
	srv := startServer(t)
	good := newClient(t, srv.addr())
	noCtx := newClient(t, srv.addr(), func(o *redis.Options) { o.ContextTimeoutEnabled = false })
	var nilClient *redis.Client
	blocking, err := newClient(t, srv.addr()).AutoPipeline()
	if err != nil {
		t.Fatal(err)
	}
	async, err := newClient(t, srv.addr()).AsyncAutoPipeline()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		client redisstore.Client
		opts   []redisstore.Option
		ok     bool
	}{
		{"defaults", good, nil, true},
		{"nil client", nil, nil, false},
		{"typed nil client", nilClient, nil, false},
		{"nil option", good, []redisstore.Option{nil}, false},
		{"no context timeouts", noCtx, nil, false},
		{"no context timeouts, check off", noCtx, []redisstore.Option{redisstore.WithoutClientCheck()}, true},
		{"brace in prefix", good, []redisstore.Option{redisstore.WithPrefix("a{b")}, false},
		{"empty prefix", good, []redisstore.Option{redisstore.WithPrefix("")}, true},
		{"negative margin", good, []redisstore.Option{redisstore.WithTTLMargin(-1)}, false},
		{"zero CAS attempts", good, []redisstore.Option{redisstore.WithCASAttempts(0)}, false},
		{"nil tag func", good, []redisstore.Option{redisstore.WithHashTag(nil)}, false},
		{"autopipeline", good, []redisstore.Option{redisstore.WithAutoPipeline(nil)}, true},
		{"autopipeline, bad options", good, []redisstore.Option{redisstore.WithAutoPipeline(&redis.AutoPipelineOptions{MaxConcurrentBatches: 2})}, false},
		{"async autopipeliner", async, nil, true},
		{"async autopipeliner, WithAutoPipeline", async, []redisstore.Option{redisstore.WithAutoPipeline(nil)}, false},
		{"blocking autopipeliner", blocking, nil, false},
		{"blocking autopipeliner, check off", blocking, []redisstore.Option{redisstore.WithoutClientCheck()}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := redisstore.New(tt.client, tt.opts...)
			if tt.ok {
				if err != nil || st == nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if !errors.Is(err, ratelimit.ErrInvalidOption) {
				t.Fatalf("New = %v, want ErrInvalidOption", err)
			}
		})
	}
}

func TestGenericSequence(t *testing.T) {
	st, _, _ := newStore(t)
	ctx := t.Context()
	lim := ratelimit.Every(time.Hour, 3)
	check := ratelimit.Check{Namespace: "ns", Key: "k", Algorithm: windowAlg{}, Limit: lim, Cost: 1}
	tests := []struct {
		cost          int64
		wantAllowed   bool
		wantRemaining int64
	}{
		{1, true, 2},
		{0, true, 2}, // peek
		{2, true, 0},
		{1, false, 0},
		{4, false, 0}, // above burst
		{0, false, 0},
	}
	for i, tt := range tests {
		c := check
		c.Cost = tt.cost
		o, err := st.Apply(ctx, c)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if o.Allowed != tt.wantAllowed || o.Remaining != tt.wantRemaining {
			t.Fatalf("step %d cost %d: allowed %v remaining %d, want %v %d", i, tt.cost, o.Allowed, o.Remaining, tt.wantAllowed, tt.wantRemaining)
		}
	}
}

// TestKeysAreData checks that namespace and key bytes are never syntax:
// awkward keys are isolated from each other, including ones whose naive
// concatenation collides.
func TestKeysAreData(t *testing.T) {
	st, _, _ := newStore(t)
	ctx := t.Context()
	pairs := [][2]string{
		{"a:b", "c"}, {"a", "b:c"}, {"", "a:bc"}, {"a:bc", "x"},
		{"ns", "{tag}x"}, {"ns", "{tag}y"}, {"ns", "}{"}, {"ns", "{}"},
		{"ns", "line\r\nSET x 1"}, {"ns", "nul\x00byte"}, {"ns", "\xff\xfe invalid utf8"},
		{"ns", "') redis.call('FLUSHALL') --"}, {"ns", "'; DROP TABLE x; --"},
		{"ns\x00", "k"}, {"ns", "\x00k"},
		{"ns", string(make([]byte, ratelimit.MaxKeyLen))},
	}
	lim := ratelimit.Every(time.Hour, 1)
	for i, p := range pairs {
		o, err := st.Apply(ctx, ratelimit.Check{Namespace: p[0], Key: p[1], Algorithm: windowAlg{}, Limit: lim, Cost: 1})
		if err != nil {
			t.Fatalf("pair %d %q: %v", i, p, err)
		}
		if !o.Allowed {
			t.Fatalf("pair %d %q denied: it shares state with an earlier pair", i, p)
		}
	}
	for i, p := range pairs {
		o, err := st.Apply(ctx, ratelimit.Check{Namespace: p[0], Key: p[1], Algorithm: windowAlg{}, Limit: lim, Cost: 0})
		if err != nil {
			t.Fatal(err)
		}
		if o.Allowed {
			t.Fatalf("pair %d %q lost its state", i, p)
		}
	}
}

func TestBadInput(t *testing.T) {
	st, _, _ := newStore(t)
	ctx := t.Context()
	good := ratelimit.Check{Namespace: "ns", Key: "k", Algorithm: windowAlg{}, Limit: ratelimit.PerSecond(1), Cost: 1}
	tests := []struct {
		name   string
		mutate func(*ratelimit.Check)
		want   error
	}{
		{"empty key", func(c *ratelimit.Check) { c.Key = "" }, ratelimit.ErrInvalidKey},
		{"long key", func(c *ratelimit.Check) { c.Key = string(make([]byte, ratelimit.MaxKeyLen+1)) }, ratelimit.ErrInvalidKey},
		{"1 MB key", func(c *ratelimit.Check) { c.Key = string(make([]byte, 1<<20)) }, ratelimit.ErrInvalidKey},
		{"long namespace", func(c *ratelimit.Check) { c.Namespace = string(make([]byte, ratelimit.MaxKeyLen+1)) }, ratelimit.ErrInvalidKey},
		{"negative cost", func(c *ratelimit.Check) { c.Cost = -1 }, ratelimit.ErrInvalidCost},
		{"zero limit", func(c *ratelimit.Check) { c.Limit = ratelimit.Limit{} }, ratelimit.ErrInvalidLimit},
		{"nil algorithm", func(c *ratelimit.Check) { c.Algorithm = nil }, ratelimit.ErrInvalidRule},
		{"unsupported op", func(c *ratelimit.Check) { c.Op = ratelimit.OpRefund }, ratelimit.ErrUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			tt.mutate(&c)
			if _, err := st.Apply(ctx, c); !errors.Is(err, tt.want) {
				t.Fatalf("Apply = %v, want %v", err, tt.want)
			}
			var out [2]ratelimit.Outcome
			if _, err := st.ApplyAll(ctx, []ratelimit.Check{good, c}, out[:]); !errors.Is(err, tt.want) {
				t.Fatalf("ApplyAll = %v, want %v", err, tt.want)
			}
		})
	}
	// Nothing above consumed the good key.
	o, err := st.Apply(ctx, good)
	if err != nil || !o.Allowed {
		t.Fatalf("good check after bad input: %+v, %v", o, err)
	}
	if err := st.Reset(ctx, "ns", ""); !errors.Is(err, ratelimit.ErrInvalidKey) {
		t.Fatalf("Reset empty key = %v", err)
	}
	var few [1]ratelimit.Outcome
	if _, err := st.ApplyAll(ctx, []ratelimit.Check{good, good}, few[:]); !errors.Is(err, ratelimit.ErrInvalidOption) {
		t.Fatalf("ApplyAll with short out = %v", err)
	}
}

func TestCorruptState(t *testing.T) {
	st, c, _ := newStore(t, redisstore.WithPrefix("corrupt:"))
	ctx := t.Context()
	check := ratelimit.Check{Namespace: "n", Key: "k", Algorithm: windowAlg{}, Limit: ratelimit.PerSecond(5), Cost: 1}
	if _, err := st.Apply(ctx, check); err != nil {
		t.Fatal(err)
	}
	keys, err := c.Keys(ctx, "corrupt:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys %q, %v", keys, err)
	}
	if err := c.Set(ctx, keys[0], "garbage", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Apply(ctx, check); !errors.Is(err, ratelimit.ErrCorruptState) {
		t.Fatalf("Apply on garbage = %v, want ErrCorruptState", err)
	}
	if v, _ := c.Get(ctx, keys[0]).Result(); v != "garbage" {
		t.Fatalf("corrupt state was changed to %q", v)
	}
	if err := c.Del(ctx, keys[0]).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, keys[0], "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Apply(ctx, check); !errors.Is(err, ratelimit.ErrCorruptState) {
		t.Fatalf("Apply on a hash = %v, want ErrCorruptState", err)
	}
	if err := st.Reset(ctx, "n", "k"); err != nil {
		t.Fatal(err)
	}
	if o, err := st.Apply(ctx, check); err != nil || !o.Allowed {
		t.Fatalf("after Reset: %+v %v", o, err)
	}
}

func TestResetAndClose(t *testing.T) {
	st, _, _ := newStore(t)
	ctx := t.Context()
	c := ratelimit.Check{Namespace: "n", Key: "k", Algorithm: windowAlg{}, Limit: ratelimit.PerHour(1), Cost: 1}
	if o, err := st.Apply(ctx, c); err != nil || !o.Allowed {
		t.Fatalf("first: %+v %v", o, err)
	}
	if o, err := st.Apply(ctx, c); err != nil || o.Allowed {
		t.Fatalf("second: %+v %v", o, err)
	}
	if err := st.Reset(ctx, "n", "k"); err != nil {
		t.Fatal(err)
	}
	if err := st.Reset(ctx, "n", "never-used"); err != nil {
		t.Fatal(err)
	}
	if o, err := st.Apply(ctx, c); err != nil || !o.Allowed {
		t.Fatalf("after reset: %+v %v", o, err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := st.Apply(ctx, c); !errors.Is(err, ratelimit.ErrClosed) {
		t.Fatalf("Apply after Close = %v", err)
	}
	var out [1]ratelimit.Outcome
	if _, err := st.ApplyAll(ctx, []ratelimit.Check{c}, out[:]); !errors.Is(err, ratelimit.ErrClosed) {
		t.Fatalf("ApplyAll after Close = %v", err)
	}
	if err := st.Reset(ctx, "n", "k"); !errors.Is(err, ratelimit.ErrClosed) {
		t.Fatalf("Reset after Close = %v", err)
	}
}

// TestCompositeAllOrNothing: a denied check leaves every other key as it
// was; checks on one key see each other's effect.
func TestCompositeAllOrNothing(t *testing.T) {
	for _, alg := range testAlgorithms() {
		t.Run("algo="+alg.Name(), func(t *testing.T) {
			st, _, _ := newStore(t)
			ctx := t.Context()
			a := ratelimit.Check{Namespace: "ip", Key: "{u}1", Algorithm: alg, Limit: ratelimit.PerHour(2), Cost: 1}
			b := ratelimit.Check{Namespace: "user", Key: "{u}2", Algorithm: alg, Limit: ratelimit.PerHour(1), Cost: 1}
			out := make([]ratelimit.Outcome, 3)
			ok, err := st.ApplyAll(ctx, []ratelimit.Check{a, b}, out)
			if err != nil || !ok {
				t.Fatalf("first composite: %v %v", ok, err)
			}
			ok, err = st.ApplyAll(ctx, []ratelimit.Check{a, b}, out)
			if err != nil || ok || !out[0].Allowed || out[1].Allowed {
				t.Fatalf("second composite: ok %v out %+v err %v", ok, out[:2], err)
			}
			// a was not consumed by the denied composite: one unit left.
			if o, err := st.Apply(ctx, a); err != nil || !o.Allowed || o.Remaining != 0 {
				t.Fatalf("a after denied composite: %+v %v", o, err)
			}
			// Same key twice: the second check sees the first's effect.
			c := ratelimit.Check{Namespace: "n", Key: "{u}3", Algorithm: alg, Limit: ratelimit.PerHour(3), Cost: 2}
			ok, err = st.ApplyAll(ctx, []ratelimit.Check{c, c}, out)
			if err != nil || ok || !out[0].Allowed || out[1].Allowed {
				t.Fatalf("same key twice: ok %v out %+v err %v", ok, out[:2], err)
			}
			c.Cost = 1
			ok, err = st.ApplyAll(ctx, []ratelimit.Check{c, c, c}, out)
			if err != nil || !ok || out[2].Remaining != 0 {
				t.Fatalf("same key thrice: ok %v out %+v err %v", ok, out[:3], err)
			}
		})
	}
}

// TestExactAdmissionConcurrentSafe: 64 goroutines over 4 stores with their
// own clients (4 gateway pods), burst 100, no refill within the test: exactly
// 100 allowed and no errors.
func TestExactAdmissionConcurrentSafe(t *testing.T) {
	for _, alg := range testAlgorithms() {
		t.Run("algo="+alg.Name(), func(t *testing.T) {
			srv := startServer(t)
			prefix := randomPrefix(t)
			stores := make([]*redisstore.Store, 4)
			for i := range stores {
				st, err := redisstore.New(newClient(t, srv.addr()), redisstore.WithPrefix(prefix), redisstore.WithCASAttempts(1000))
				if err != nil {
					t.Fatal(err)
				}
				stores[i] = st
			}
			lim := ratelimit.Every(24*time.Hour, 100)
			var allowed, errs atomic.Int64
			var wg sync.WaitGroup
			for g := range 64 {
				wg.Go(func() {
					st := stores[g%len(stores)]
					for range 4 {
						o, err := st.Apply(t.Context(), ratelimit.Check{Namespace: "n", Key: "hot", Algorithm: alg, Limit: lim, Cost: 1})
						if err != nil {
							errs.Add(1)
							t.Log(err)
							continue
						}
						if o.Allowed {
							allowed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if allowed.Load() != 100 || errs.Load() != 0 {
				t.Fatalf("allowed %d (want 100), errors %d (want 0)", allowed.Load(), errs.Load())
			}
		})
	}
}

// TestTTL: every key carries a PEXPIRE of at most the algorithm's TTL plus
// the margin, and a TTL-0 state leaves no key.
func TestTTL(t *testing.T) {
	for _, alg := range testAlgorithms() {
		t.Run("algo="+alg.Name(), func(t *testing.T) {
			margin := 250 * time.Millisecond
			st, c, _ := newStore(t, redisstore.WithPrefix("ttl:"), redisstore.WithTTLMargin(margin))
			ctx := t.Context()
			lim := ratelimit.Every(10*time.Second, 5)
			o, err := st.Apply(ctx, ratelimit.Check{Namespace: "n", Key: "k", Algorithm: alg, Limit: lim, Cost: 2})
			if err != nil || !o.Allowed {
				t.Fatalf("%+v %v", o, err)
			}
			keys, err := c.Keys(ctx, "ttl:*").Result()
			if err != nil || len(keys) != 1 {
				t.Fatalf("keys %q %v", keys, err)
			}
			pttl, err := c.PTTL(ctx, keys[0]).Result()
			if err != nil {
				t.Fatal(err)
			}
			if pttl <= 0 || pttl > o.TTL+margin+time.Millisecond {
				t.Fatalf("PTTL %s, want in (0, %s]", pttl, o.TTL+margin+time.Millisecond)
			}
			if err := st.Reset(ctx, "n", "k"); err != nil {
				t.Fatal(err)
			}
			// A peek on a fresh key writes nothing.
			if _, err := st.Apply(ctx, ratelimit.Check{Namespace: "n", Key: "k", Algorithm: alg, Limit: lim, Cost: 0}); err != nil {
				t.Fatal(err)
			}
			if n, err := c.Exists(ctx, keys[0]).Result(); err != nil || n != 0 {
				t.Fatalf("peek created a key: %d %v", n, err)
			}
		})
	}
}

func TestContextDone(t *testing.T) {
	st, _, _ := newStore(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := st.Apply(ctx, ratelimit.Check{Namespace: "n", Key: "k", Algorithm: windowAlg{}, Limit: ratelimit.PerSecond(1), Cost: 1})
	if !errors.Is(err, ratelimit.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply with a canceled context = %v", err)
	}
}
