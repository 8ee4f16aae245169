package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/algorithms/slidinglog"
	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/fakeclock"
)

// TestTakeMatchesApply runs the same random sequence of takes, peeks and
// clock moves through Namespace.Take on one store and Apply on another:
// every outcome and error must agree, across new keys, expired keys,
// denials and keys reclaimed (which ones a sweep takes is random).
func TestTakeMatchesApply(t *testing.T) {
	for _, l := range []ratelimit.Limit{
		ratelimit.PerSecond(10).WithBurst(5),
		ratelimit.Every(time.Hour, 3),
		ratelimit.PerSecond(1_000_000_000),
	} {
		t.Run(l.String(), func(t *testing.T) {
			clkA, clkB := fakeclock.New(), fakeclock.New()
			a, err := memstore.New(memstore.WithClock(clkA), memstore.WithReclaimGrace(0))
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := memstore.New(memstore.WithClock(clkB), memstore.WithReclaimGrace(0))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			p := memstore.Prepare(gcra.New(), l)
			if p == nil {
				t.Fatal("Prepare(gcra) = nil")
			}
			ns := a.Namespace("t")
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range 20000 {
				key := fmt.Sprint("k", rng.IntN(50))
				if rng.IntN(2) == 0 {
					key = strings.Repeat("long", 5) + key // not inline in the entry
				}
				cost := []int64{0, 1, 1, 1, 2, l.Burst, l.Burst + 1}[rng.IntN(7)]
				var got decision.Fields
				errA := ns.Take(t.Context(), p, key, cost, &got)
				o, errB := b.Apply(t.Context(), ratelimit.Check{Namespace: "t", Key: key, Algorithm: gcra.New(), Limit: l, Cost: cost})
				want := decision.Fields{Allowed: o.Allowed, Remaining: o.Remaining, RetryAfter: o.RetryAfter, ResetAfter: o.ResetAfter}
				if (errA == nil) != (errB == nil) || got != want && errA == nil {
					t.Fatalf("call %d (%s, cost %d): Take %+v %v, Apply %+v %v", i, key, cost, got, errA, want, errB)
				}
				if d := time.Duration(rng.Int64N(int64(l.Period) / 4)); rng.IntN(3) == 0 {
					clkA.Advance(d)
					clkB.Advance(d)
				}
			}
		})
	}
}

func TestTakeErrors(t *testing.T) {
	s, _ := newMem(t)
	l := ratelimit.PerSecond(10)
	p := memstore.Prepare(gcra.New(), l)
	ns := s.Namespace("t")
	var d decision.Fields
	if err := ns.Take(t.Context(), p, "", 1, &d); !errors.Is(err, ratelimit.ErrInvalidKey) {
		t.Errorf("empty key: %v, want ErrInvalidKey", err)
	}
	if err := ns.Take(t.Context(), p, strings.Repeat("k", ratelimit.MaxKeyLen+1), 1, &d); !errors.Is(err, ratelimit.ErrInvalidKey) {
		t.Errorf("long key: %v, want ErrInvalidKey", err)
	}
	if err := ns.Take(t.Context(), p, "k", -1, &d); !errors.Is(err, ratelimit.ErrInvalidCost) {
		t.Errorf("negative cost: %v, want ErrInvalidCost", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := ns.Take(ctx, p, "k", 1, &d); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v, want context.Canceled", err)
	}
	// A state another algorithm wrote under the same namespace, too big
	// to be inline, is reported corrupt, as Apply reports it.
	if _, err := s.Apply(t.Context(), ratelimit.Check{Namespace: "t", Key: "log", Algorithm: slidinglog.New(), Limit: l, Cost: 3}); err != nil {
		t.Fatal(err)
	}
	if err := ns.Take(t.Context(), p, "log", 1, &d); !errors.Is(err, ratelimit.ErrCorruptState) {
		t.Errorf("sliding log state: %v, want ErrCorruptState", err)
	}
	if _, err := s.Apply(t.Context(), ratelimit.Check{Namespace: "t", Key: "tb", Algorithm: tokenbucket.New(), Limit: l, Cost: 3}); err != nil {
		t.Fatal(err)
	}
	if err := ns.Take(t.Context(), p, "tb", 1, &d); !errors.Is(err, ratelimit.ErrCorruptState) {
		t.Errorf("token bucket state: %v, want ErrCorruptState", err)
	}
	_ = s.Close()
	if err := ns.Take(t.Context(), p, "k", 1, &d); !errors.Is(err, ratelimit.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
	if memstore.Prepare(slidinglog.New(), l) != nil {
		t.Error("Prepare(slidinglog) is not nil: it has no in-place take")
	}
}

// TestTakeExactUnderContentionConcurrentSafe runs Take on the system
// clock, read before the shard's lock, from 64 goroutines: exactly the
// burst is admitted.
func TestTakeExactUnderContentionConcurrentSafe(t *testing.T) {
	s, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := ratelimit.Every(1000*time.Hour, 1).WithBurst(100)
	p := memstore.Prepare(gcra.New(), l)
	ns := s.Namespace("t")
	admitsExactly(t, 100, func() (bool, error) {
		var d decision.Fields
		err := ns.Take(t.Context(), p, "race", 1, &d)
		return d.Allowed, err
	})
}

// TestTakeNeverAboveRateConcurrentSafe races callers for one key with
// Take reading the system clock before the lock: at 1 unit per µs with a
// burst of 1, they are admitted at most once per µs elapsed, plus the
// first.
func TestTakeNeverAboveRateConcurrentSafe(t *testing.T) {
	s, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := ratelimit.Every(time.Microsecond, 1)
	p := memstore.Prepare(gcra.New(), l)
	ns := s.Namespace("t")
	var allowed atomic.Int64
	var wg sync.WaitGroup
	begin := time.Now()
	for range 8 {
		wg.Go(func() {
			for range 20000 {
				var d decision.Fields
				if err := ns.Take(t.Context(), p, "k", 1, &d); err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if most := int64(time.Since(begin)/time.Microsecond) + 1; allowed.Load() > most {
		t.Fatalf("%d admitted in %s, more than %d", allowed.Load(), time.Since(begin), most)
	}
}

func TestTakeZeroAllocs(t *testing.T) {
	for _, alg := range []ratelimit.Algorithm{gcra.New(), tokenbucket.New()} {
		s, _ := newMem(t)
		p := memstore.Prepare(alg, ratelimit.Every(time.Nanosecond, 1<<40))
		if p == nil {
			t.Fatalf("Prepare(%s) = nil", alg.Name())
		}
		ns := s.Namespace("t")
		ctx := context.Background()
		var d decision.Fields
		if err := ns.Take(ctx, p, "hot", 1, &d); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(1000, func() { _ = ns.Take(ctx, p, "hot", 1, &d) }); n != 0 {
			t.Fatalf("%s: Take on an existing key: %v allocs/op, want 0", alg.Name(), n)
		}
	}
}

// TestGrowthExactConcurrentSafe races goroutines over fresh keys,
// short and long, through Take and Apply, so that every shard's tables
// grow while others decide, some keys holding states too big for an
// entry: each key admits exactly its burst.
func TestGrowthExactConcurrentSafe(t *testing.T) {
	s, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const burst, logBurst, workers, rounds = 3, 8, 4, 3
	nkeys := 10_000 // about 20 growths of every shard's table
	if testing.Short() {
		nkeys = 2_000
	}
	l := ratelimit.Every(1000*time.Hour, 1).WithBurst(burst)
	p := memstore.Prepare(gcra.New(), l)
	ns := s.Namespace("t")
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
		if i%5 == 0 {
			keys[i] += strings.Repeat("-long", 4)
		}
	}
	allowed := make([]atomic.Int64, nkeys)
	var errs atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range rounds {
				for _, i := range r.Perm(nkeys) {
					var o ratelimit.Outcome
					var err error
					switch {
					case i%7 == 3: // a sliding log of 8 stamps: a big state
						c := check(keys[i], l.WithBurst(logBurst), 1)
						c.Algorithm = slidinglog.New()
						o, err = s.Apply(t.Context(), c)
					case i%2 == 0:
						var d decision.Fields
						err = ns.Take(t.Context(), p, keys[i], 1, &d)
						o.Allowed = d.Allowed
					default:
						o, err = s.Apply(t.Context(), check(keys[i], l, 1))
					}
					if err != nil {
						errs.Add(1)
					} else if o.Allowed {
						allowed[i].Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	if errs.Load() != 0 {
		t.Fatalf("%d errors", errs.Load())
	}
	for i := range allowed {
		want := int64(burst)
		if i%7 == 3 {
			want = logBurst
		}
		if n := allowed[i].Load(); n != want {
			t.Fatalf("%q admitted %d of %d, want exactly %d", keys[i], n, workers*rounds, want)
		}
	}
	if n := memstore.Keys(s); n != nkeys {
		t.Fatalf("%d keys held, want %d", n, nkeys)
	}
}
