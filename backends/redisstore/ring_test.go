package redisstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/backends/redisstore"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// TestRing runs single checks and composites through a Ring of two
// servers: a composite whose checks share a tag source works, one whose
// tags differ is refused with redisstore.ErrCrossSlot (a Ring would otherwise run the
// script on one shard with keys another shard owns).
func TestRing(t *testing.T) {
	a, b := startServer(t), startServer(t)
	ring := redis.NewRing(&redis.RingOptions{
		Addrs:                 map[string]string{"a": a.addr(), "b": b.addr()},
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		ReadTimeout:           2 * time.Second,
		WriteTimeout:          2 * time.Second,
	})
	t.Cleanup(func() { _ = ring.Close() })
	st, err := redisstore.New(ring, redisstore.WithPrefix(randomPrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, alg := range testAlgorithms() {
		lim := ratelimit.PerHour(1)
		for i, key := range []string{"u1", "u2", "u3", "u4"} {
			c := ratelimit.Check{Namespace: alg.Name(), Key: key, Algorithm: alg, Limit: lim, Cost: 1}
			if o, err := st.Apply(ctx, c); err != nil || !o.Allowed {
				t.Fatalf("%s single %d: %+v %v", alg.Name(), i, o, err)
			}
			if o, err := st.Apply(ctx, c); err != nil || o.Allowed {
				t.Fatalf("%s single %d again: %+v %v (state lost between shards?)", alg.Name(), i, o, err)
			}
		}
		out := make([]ratelimit.Outcome, 2)
		shared := []ratelimit.Check{
			{Namespace: alg.Name() + "/m", Key: "{t9}a", Algorithm: alg, Limit: lim, Cost: 1},
			{Namespace: alg.Name() + "/d", Key: "{t9}b", Algorithm: alg, Limit: lim, Cost: 1},
		}
		if ok, err := st.ApplyAll(ctx, shared, out); err != nil || !ok {
			t.Fatalf("%s composite with one tag: %v %v", alg.Name(), ok, err)
		}
		mixed := []ratelimit.Check{
			{Namespace: alg.Name(), Key: "x", Algorithm: alg, Limit: lim, Cost: 1},
			{Namespace: alg.Name(), Key: "y", Algorithm: alg, Limit: lim, Cost: 1},
		}
		if _, err := st.ApplyAll(ctx, mixed, out); !errors.Is(err, redisstore.ErrCrossSlot) {
			t.Fatalf("%s composite with two tags on a Ring: %v, want redisstore.ErrCrossSlot", alg.Name(), err)
		}
	}
	noCtx := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.addr()}})
	t.Cleanup(func() { _ = noCtx.Close() })
	if _, err := redisstore.New(noCtx); !errors.Is(err, ratelimit.ErrInvalidOption) {
		t.Fatalf("New with a Ring without ContextTimeoutEnabled: %v, want ErrInvalidOption", err)
	}
}
