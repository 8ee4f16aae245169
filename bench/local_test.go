package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms/catalog"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/ulule/limiter/v3"
	ulmem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"
)

// open is the "Open" spec of perf-anchors.md: every call is admitted, but
// the full read-modify-write still runs.
const openRate = 1_000_000_000

// taker is one limiter under test: take one unit for key.
type taker func(ctx context.Context, key string) bool

func sluiceLimiter(b testing.TB, alg ratelimit.Algorithm) taker {
	lim, err := sluice.New(sluice.Rule{Name: "b", Algorithm: alg, Limit: ratelimit.PerSecond(openRate)}, sluice.WithStore(privateStore(b)))
	if err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context, key string) bool {
		d, err := lim.Allow(ctx, key)
		return err == nil && d.Allowed
	}
}

func xtimerate(_ testing.TB) taker {
	var m sync.Map
	return func(_ context.Context, key string) bool {
		v, ok := m.Load(key)
		if !ok {
			v, _ = m.LoadOrStore(key, rate.NewLimiter(rate.Limit(openRate), openRate))
		}
		return v.(*rate.Limiter).Allow()
	}
}

func sethvargo(b testing.TB) taker {
	s, err := memorystore.New(&memorystore.Config{Tokens: openRate, Interval: time.Second, SweepInterval: time.Hour, SweepMinTTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close(context.Background()) })
	return func(ctx context.Context, key string) bool {
		_, _, _, ok, _ := s.Take(ctx, key)
		return ok
	}
}

func ulule(_ testing.TB) taker {
	l := limiter.New(ulmem.NewStore(), limiter.Rate{Period: time.Second, Limit: openRate})
	return func(ctx context.Context, key string) bool {
		c, err := l.Get(ctx, key)
		return err == nil && !c.Reached
	}
}

type impl struct {
	name string
	make func(testing.TB) taker
}

var oneKey = []impl{
	{"sluice-gcra", func(b testing.TB) taker { return sluiceLimiter(b, gcra.New()) }},
	{"sluice-tokenbucket", func(b testing.TB) taker { return sluiceLimiter(b, tokenbucket.New()) }},
	{"xtimerate", xtimerate},
	{"sethvargo", sethvargo},
	{"ulule", ulule},
}

var manyKeys = []impl{
	{"sluice-gcra", func(b testing.TB) taker { return sluiceLimiter(b, gcra.New()) }},
	{"sluice-tokenbucket", func(b testing.TB) taker { return sluiceLimiter(b, tokenbucket.New()) }},
	{"sethvargo", sethvargo},
	{"ulule", ulule},
	{"xtimerate", xtimerate},
}

// BenchmarkLocal compares in-memory limiters on one hot key and on a
// million pre-warmed keys, sequentially (par=1) and with RunParallel
// (par=procs).
//
// The 1M-key lookups use fresh strings, equal to the inserted keys but not
// the same memory: a store that keeps the caller's string would otherwise
// find its key by pointer (Go's string comparison short-circuits) and
// skip reading the key bytes, which a real request never lets it do. Each
// 1M-key store is built only when one of its sub-benchmarks runs, and
// freed (closed, collected) before the next one is built.
func BenchmarkLocal(b *testing.B) {
	ctx := context.Background()
	b.Run("keys=1", func(b *testing.B) {
		for _, im := range oneKey {
			b.Run("impl="+im.name, func(b *testing.B) {
				take := im.make(b)
				b.Run("par=1", func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						take(ctx, "hot")
					}
				})
				b.Run("par=procs", func(b *testing.B) {
					b.ReportAllocs()
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							take(ctx, "hot")
						}
					})
				})
			})
		}
	})
	b.Run("keys=1M", func(b *testing.B) {
		const n = 1_000_000
		inserted := makeKeys(n)
		lookup := make([]string, n)
		for i, k := range inserted {
			lookup[i] = strings.Clone(k)
		}
		for _, im := range manyKeys {
			b.Run("impl="+im.name, func(b *testing.B) {
				runtime.GC() // the previous store's garbage is not this one's cost
				take := im.make(b)
				for _, k := range inserted {
					take(ctx, k)
				}
				b.Run("par=1", func(b *testing.B) {
					r := rand.New(rand.NewPCG(1, 2))
					b.ReportAllocs()
					for b.Loop() {
						take(ctx, lookup[r.IntN(n)])
					}
				})
				b.Run("par=procs", func(b *testing.B) {
					b.ReportAllocs()
					var seed atomic.Uint64
					b.RunParallel(func(pb *testing.PB) {
						r := rand.New(rand.NewPCG(seed.Add(1), 7))
						for pb.Next() {
							take(ctx, lookup[r.IntN(n)])
						}
					})
				})
			})
		}
	})
}

// BenchmarkAlgorithm reports the decision cost of every in-repo algorithm
// through the embedded store on one key, so a contributor sees the price of
// each.
func BenchmarkAlgorithm(b *testing.B) {
	ctx := context.Background()
	for _, alg := range catalog.All() {
		s, err := memstore.New()
		if err != nil {
			b.Fatal(err)
		}
		c := ratelimit.Check{Namespace: "b", Key: "hot", Algorithm: alg, Limit: ratelimit.PerSecond(1 << 30), Cost: 1}
		b.Run("algo="+alg.Name()+"/op=store-apply", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Apply(ctx, c); err != nil {
					b.Fatal(err)
				}
			}
		})
		now := time.Now().UnixNano()
		state, dst := []byte(nil), make([]byte, 0, 4096)
		b.Run("algo="+alg.Name()+"/op=decide", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				now++
				_, out, err := alg.Decide(state, now, c.Limit, 1, dst[:0])
				if err != nil {
					b.Fatal(err)
				}
				state = append(state[:0], out...)
			}
		})
		_ = s.Close()
	}
}

// BenchmarkMemoryPerKey reports the heap held per idle key after 1M keys
// (after GC), counting every store alike: each key is a fresh 12-byte
// string made for its one call, so a store that keeps the caller's string
// is charged for it, and a store that copies the key is charged for its
// copy while the caller's becomes garbage. Run with -benchtime=1x.
func BenchmarkMemoryPerKey(b *testing.B) {
	const n = 1_000_000
	strict := []impl{
		{"sluice-gcra", func(b testing.TB) taker { return strictSluice(b, gcra.New()) }},
		{"sluice-tokenbucket", func(b testing.TB) taker { return strictSluice(b, tokenbucket.New()) }},
		{"sethvargo", sethvargo},
		{"ulule", ulule},
		{"xtimerate", xtimerate},
	}
	for _, im := range strict {
		b.Run("keys=1M/impl="+im.name, func(b *testing.B) {
			for b.Loop() {
				before := heap()
				take := im.make(b)
				ctx := context.Background()
				var buf []byte
				for i := range n {
					buf = appendKey(buf[:0], i)
					take(ctx, string(buf))
				}
				after := heap()
				b.ReportMetric(float64(after-before)/n, "B/key")
				runtime.KeepAlive(take)
			}
		})
	}
}

func strictSluice(b testing.TB, alg ratelimit.Algorithm) taker {
	lim, err := sluice.New(sluice.Rule{Name: "b", Algorithm: alg, Limit: ratelimit.Every(1000*time.Hour, 1).WithBurst(100)}, sluice.WithStore(privateStore(b)))
	if err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context, key string) bool {
		d, err := lim.Allow(ctx, key)
		return err == nil && d.Allowed
	}
}

func heap() uint64 {
	var m runtime.MemStats
	for range 2 {
		runtime.GC()
	}
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func makeKeys(n int) []string {
	keys := make([]string, n)
	var buf []byte
	for i := range keys {
		buf = appendKey(buf[:0], i)
		keys[i] = string(buf)
	}
	return keys
}

// appendKey appends the i-th benchmark key, "user:%07d", to dst.
func appendKey(dst []byte, i int) []byte {
	dst = append(dst, "user:"...)
	for d := 1_000_000; d > 1 && i < d; d /= 10 {
		dst = append(dst, '0')
	}
	return strconv.AppendInt(dst, int64(i), 10)
}

func procs() int { return runtime.GOMAXPROCS(0) }

// keyChooser returns a function picking the next key: one hot key, or a
// uniformly random one of n keys (appendKey's), under a random prefix so
// runs never share state in a remote store. Each key is built from its
// number: reading it from a table of a million strings would cost every
// limiter a cache miss that is the harness's, not the limiter's.
func keyChooser(prefix string, hot bool, n int) func(*rand.Rand) string {
	prefix = fmt.Sprintf("%s%d:", prefix, rand.Uint64())
	if hot {
		k := prefix + "hot"
		return func(*rand.Rand) string { return k }
	}
	return func(r *rand.Rand) string {
		var buf [64]byte
		return string(appendKey(append(buf[:0], prefix...), r.IntN(n)))
	}
}

// runConcurrent runs take with conc callers: a plain loop for conc 1, else
// RunParallel with conc goroutines in all.
func runConcurrent(b *testing.B, conc int, take taker, key func(*rand.Rand) string) {
	ctx := context.Background()
	b.ReportAllocs()
	if conc == 1 {
		r := rand.New(rand.NewPCG(1, 1))
		for b.Loop() {
			take(ctx, key(r))
		}
		return
	}
	b.SetParallelism(max(conc/procs(), 1))
	var seed atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		r := rand.New(rand.NewPCG(seed.Add(1), 3))
		for pb.Next() {
			take(ctx, key(r))
		}
	})
}

// privateStore returns a memory store of the benchmark's own, closed when
// it ends, so that no two benchmarks share buckets.
func privateStore(b testing.TB) *memstore.Store {
	st, err := memstore.New()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	return st
}

func TestAppendKey(t *testing.T) {
	for _, i := range []int{0, 7, 42, 999_999, 1_000_000, 9_999_999} {
		if got, want := string(appendKey(nil, i)), fmt.Sprintf("user:%07d", i); got != want {
			t.Errorf("appendKey(%d) = %q, want %q", i, got, want)
		}
	}
}
