package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/algorithms/catalog"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/backends/redisstore"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// TestCoalescedMatchesPlain runs 32 goroutines, each with its own keys,
// algorithms and limits, through a coalescing store and a plain one
// (WithoutCoalescing) at the same injected instants: every call, single
// or composite, gets the same outcome from both, while the coalescing
// store sends them in batches of several calls. The plain path is proven
// against the Go algorithms by TestNativeMatchesGo and its siblings.
func TestCoalescedMatchesPlain(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv.addr(), func(o *redis.Options) { o.PoolSize = 64 })
	clock := &manualClock{ns: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC).UnixNano()}
	newStore := func(opts ...redisstore.Option) *redisstore.Store {
		st, err := redisstore.New(c, append(opts, redisstore.WithPrefix(randomPrefix(t)), redisstore.WithTestClock(clock), redisstore.WithTTLMargin(time.Hour))...)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	batched, plain := newStore(), newStore(redisstore.WithoutCoalescing())
	algs := catalog.All()
	const workers, phases, steps = 32, 6, 12
	type plan struct {
		checks []ratelimit.Check
	}
	r := rand.New(rand.NewPCG(7, 11))
	plans := make([]plan, workers)
	for w := range plans {
		for i := range 1 + r.IntN(3) {
			alg := algs[r.IntN(len(algs))]
			plans[w].checks = append(plans[w].checks, ratelimit.Check{
				Namespace: fmt.Sprintf("w%d", w), Key: fmt.Sprintf("k%d", i), Algorithm: alg, Limit: randomLimit(r, alg),
			})
		}
	}
	for phase := range phases {
		var wg sync.WaitGroup
		for w := range workers {
			seed := r.Uint64()
			wg.Go(func() {
				r := rand.New(rand.NewPCG(seed, uint64(w)))
				checks := append([]ratelimit.Check(nil), plans[w].checks...)
				for step := range steps {
					for i := range checks {
						checks[i].Cost = r.Int64N(min(checks[i].Limit.Burst, 4) + 2)
					}
					got := make([]ratelimit.Outcome, len(checks))
					want := make([]ratelimit.Outcome, len(checks))
					okGot, errGot := batched.ApplyAll(t.Context(), checks, got)
					okWant, errWant := plain.ApplyAll(t.Context(), checks, want)
					if errGot != nil || errWant != nil {
						t.Errorf("phase %d, worker %d, step %d: errors %v (coalesced) and %v (plain)", phase, w, step, errGot, errWant)
						return
					}
					if okGot != okWant || fmt.Sprint(got) != fmt.Sprint(want) {
						t.Errorf("phase %d, worker %d, step %d, checks %+v:\ncoalesced %t %+v\nplain     %t %+v", phase, w, step, checks, okGot, got, okWant, want)
						return
					}
				}
			})
		}
		wg.Wait()
		clock.ns += r.Int64N(int64(time.Minute))
	}
	batches, calls := batched.BatchCounts()
	if calls <= batches {
		t.Fatalf("%d calls in %d batches: want batches of several calls", calls, batches)
	}
	t.Logf("%d of %d calls in %d batches, the others sent alone", calls, workers*phases*steps, batches)
}

// TestCoalescedLostReplyNoDoubleSpend queues 16 calls into one batch and
// drops its reply: every call reports ErrUnknownOutcome and the server
// shows each spent exactly once (the batch ran once, never resent).
func TestCoalescedLostReplyNoDoubleSpend(t *testing.T) {
	srv := startServer(t)
	proxy := newDropProxy(t, srv.addr())
	prefix := randomPrefix(t)
	st, err := redisstore.New(newClient(t, proxy.addr()), redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	direct, err := redisstore.New(newClient(t, srv.addr()), redisstore.WithPrefix(prefix), redisstore.WithoutCoalescing())
	if err != nil {
		t.Fatal(err)
	}
	check := ratelimit.Check{Namespace: "l", Key: "k", Algorithm: gcra.New(), Limit: ratelimit.PerHour(100), Cost: 1}
	if _, err := st.Apply(t.Context(), check); err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	const calls = 16
	st.HoldBatches()
	errs := make([]error, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() { _, errs[i] = st.Apply(t.Context(), check) })
	}
	waitFor(t, func() bool { return st.QueuedCalls() == calls })
	proxy.armed.Store(true)
	st.ReleaseBatches()
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, ratelimit.ErrUnknownOutcome) {
			t.Errorf("call %d of the lost batch: %v, want ErrUnknownOutcome", i, err)
		}
	}
	if spent := spent(t, direct, check); spent != 1+calls {
		t.Fatalf("server shows %d spends after the warm-up and one lost batch of %d calls, want %d", spent, calls, 1+calls)
	}
	if b, n := st.BatchCounts(); b != 1 || n != calls {
		t.Fatalf("%d batches of %d calls, want one batch of %d (the warm-up went alone)", b, n, calls)
	}
}

// TestCoalescedDropsEndedCalls: calls whose context ends while they wait
// for a batch report ErrUnavailable and are never sent; calls queued with
// them are sent and decided.
func TestCoalescedDropsEndedCalls(t *testing.T) {
	st, _, _ := newStore(t)
	check := ratelimit.Check{Namespace: "l", Key: "k", Algorithm: gcra.New(), Limit: ratelimit.PerHour(100), Cost: 1}
	st.HoldBatches()
	const ended, live = 8, 4
	errs := make([]error, ended+live)
	var wg sync.WaitGroup
	for i := range ended + live {
		ctx := t.Context()
		if i < ended {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, 20*time.Millisecond)
			defer cancel()
		}
		wg.Go(func() { _, errs[i] = st.Apply(ctx, check) })
	}
	waitFor(t, func() bool { return st.QueuedCalls() == live })
	st.ReleaseBatches()
	wg.Wait()
	for i, err := range errs {
		switch {
		case i < ended && !errors.Is(err, ratelimit.ErrUnavailable):
			t.Errorf("call %d, context ended in the queue: %v, want ErrUnavailable", i, err)
		case i >= ended && err != nil:
			t.Errorf("call %d: %v, want a decision", i, err)
		}
	}
	if spent := spent(t, st, check); spent != live {
		t.Fatalf("server shows %d spends, want %d: a dropped call was sent", spent, live)
	}
}

// applyWithin applies c bounded by 20 ms: through its context's deadline
// (ctx) or through ApplyBefore's deadline (value).
type applyWithin struct {
	name  string
	apply func(ctx context.Context, st *redisstore.Store, c ratelimit.Check) error
}

var deadlineKinds = []applyWithin{
	{"ctx", func(ctx context.Context, st *redisstore.Store, c ratelimit.Check) error {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		_, err := st.Apply(ctx, c)
		return err
	}},
	{"value", func(ctx context.Context, st *redisstore.Store, c ratelimit.Check) error {
		_, err := st.ApplyBefore(ctx, time.Now().Add(20*time.Millisecond), c)
		return err
	}},
}

// TestCoalescedQueuedCallEndsAtItsDeadline pauses the server's writes
// (CLIENT PAUSE WRITE) while calls without a deadline fill every batch
// slot: calls queued behind them return ErrUnavailable when their own
// deadlines pass, while those batches are still in flight, and are never
// sent. A call's deadline bounds its wait in the queue, not the batches
// ahead of it; with go-redis's autopipeliner under the coalescer too, and
// with the deadline given by the call's context or as a value.
func TestCoalescedQueuedCallEndsAtItsDeadline(t *testing.T) {
	srv := startServer(t)
	admin := newClient(t, srv.addr())
	for _, mode := range []clientMode{
		{"plain", nil},
		{"autopipeline", []redisstore.Option{redisstore.WithAutoPipeline(nil)}},
	} {
		for _, within := range deadlineKinds {
			t.Run("client="+mode.name+"/deadline="+within.name, func(t *testing.T) {
				testQueuedCallEndsAtItsDeadline(t, admin, srv.addr(), mode, within)
			})
		}
	}
}

func testQueuedCallEndsAtItsDeadline(t *testing.T, admin *redis.Client, addr string, mode clientMode, within applyWithin) {
	st, check := pausableStore(t, addr, mode.opts...)
	unpause := pauseWrites(t, admin)
	defer unpause()

	// Holders: no deadline, so their batches stay in flight
	// until the pause ends.
	var holders sync.WaitGroup
	var heldDone sync.Map
	for i := range redisstore.HoldingCalls {
		holders.Go(func() {
			_, err := st.Apply(t.Context(), check)
			heldDone.Store(i, err)
		})
	}
	waitFor(t, func() bool { return st.BatchesInFlight() == redisstore.HoldingCalls })

	const queued = 4
	errs := make([]error, queued)
	var wg sync.WaitGroup
	for i := range queued {
		wg.Go(func() { errs[i] = within.apply(t.Context(), st, check) })
	}
	wg.Wait()
	heldDone.Range(func(k, v any) bool {
		t.Errorf("holder %v returned (%v) before the queued calls: its batch was not in flight", k, v)
		return true
	})
	if n := st.BatchesInFlight(); n != redisstore.HoldingCalls {
		t.Errorf("%d batches in flight after the queued calls returned, want the holders' %d", n, redisstore.HoldingCalls)
	}
	for i, err := range errs {
		if !errors.Is(err, ratelimit.ErrUnavailable) {
			t.Errorf("queued call %d: %v, want ErrUnavailable at its deadline", i, err)
		}
	}

	unpause()
	holders.Wait()
	heldDone.Range(func(k, v any) bool {
		if v != nil {
			t.Errorf("holder %v after the pause: %v", k, v)
		}
		return true
	})
	if spent, want := spent(t, st, check), int64(1+redisstore.HoldingCalls); spent != want {
		t.Fatalf("server shows %d spends, want %d (warm-up and holders): a queued call was sent", spent, want)
	}
}

// TestCoalescedSentCallEndsAtItsDeadline sends one batch of calls while
// the server's writes are paused, one of them without a deadline so the
// batch stays in flight: each of the others returns ErrUnknownOutcome
// when its deadline passes, given by its context or as a value; after
// the pause the server shows every call applied once.
func TestCoalescedSentCallEndsAtItsDeadline(t *testing.T) {
	srv := startServer(t)
	admin := newClient(t, srv.addr())
	for _, within := range deadlineKinds {
		t.Run("deadline="+within.name, func(t *testing.T) {
			st, check := pausableStore(t, srv.addr())
			const calls = 6
			errs := make([]error, calls)
			took := make([]time.Duration, calls)
			st.HoldBatches()
			holder := make(chan error, 1)
			go func() {
				_, err := st.Apply(t.Context(), check)
				holder <- err
			}()
			waitFor(t, func() bool { return st.QueuedCalls() == 1 })
			var wg sync.WaitGroup
			for i := range calls {
				wg.Go(func() {
					start := time.Now()
					errs[i] = within.apply(t.Context(), st, check)
					took[i] = time.Since(start)
				})
			}
			waitFor(t, func() bool { return st.QueuedCalls() == 1+calls })
			unpause := pauseWrites(t, admin)
			defer unpause()
			st.ReleaseBatches()
			wg.Wait()
			if n := st.BatchesInFlight(); n != 1 {
				t.Errorf("%d batches in flight after the calls returned, want their one", n)
			}
			unpause()
			for i, err := range errs {
				if !errors.Is(err, ratelimit.ErrUnknownOutcome) {
					t.Errorf("call %d: %v after %s, want ErrUnknownOutcome at its deadline", i, err, took[i])
				}
			}
			if err := <-holder; err != nil {
				t.Errorf("the call without a deadline: %v", err)
			}
			if spent, want := spent(t, st, check), int64(2+calls); spent != want {
				t.Fatalf("server shows %d spends, want %d: each call applied once", spent, want)
			}
		})
	}
}

// TestCoalescedBatchMatchesSequential queues calls one by one into single
// batches, so their order is known, and checks every outcome against a
// memory store given the same calls in that order at the same instant.
// The calls share a few keys (single calls on a key others name, and
// composites over keys singles name, some repeating a key), mix takes,
// reservations, refunds and charges of every algorithm, and include keys
// of their own: every path of a batch in native.lua, and its sharing of
// one argument among checks of the same rule and cost.
func TestCoalescedBatchMatchesSequential(t *testing.T) {
	srv := startServer(t)
	clock := &manualClock{ns: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC).UnixNano()}
	st := clockedStore(t, newClient(t, srv.addr()), clock, randomPrefix(t))
	mem := clockedMemory(t, clock)
	r := rand.New(rand.NewPCG(3, 5))
	algs := catalog.All()
	type keyPlan struct {
		key   string
		alg   ratelimit.Algorithm
		limit ratelimit.Limit
	}
	shared := make([]keyPlan, 6)
	for i := range shared {
		alg := algs[i%len(algs)]
		shared[i] = keyPlan{fmt.Sprintf("shared%d", i), alg, randomLimit(r, alg)}
	}
	check := func(kp keyPlan) ratelimit.Check {
		c := ratelimit.Check{Namespace: "b", Key: kp.key, Algorithm: kp.alg, Limit: kp.limit, Cost: r.Int64N(min(kp.limit.Burst, 3) + 2)}
		_, reserves := kp.alg.(ratelimit.Reserver)
		_, charges := kp.alg.(ratelimit.Charger)
		switch n := r.IntN(8); {
		case n == 0 && reserves:
			c.Op, c.MaxWait = ratelimit.OpReserve, time.Duration(r.Int64N(int64(time.Hour)))
		case n == 1 && reserves:
			c.Op = ratelimit.OpRefund
		case n == 2 && charges:
			c.Op = ratelimit.OpCharge
		}
		return c
	}
	own, compositesAllowed := 0, 0
	const batches, calls = 20, 24
	for b := range batches {
		plan := make([][]ratelimit.Check, calls)
		for i := range plan {
			switch r.IntN(3) {
			case 0: // a single check on a shared key
				plan[i] = []ratelimit.Check{check(shared[r.IntN(len(shared))])}
			case 1: // a key of its own
				alg := algs[r.IntN(len(algs))]
				own++
				plan[i] = []ratelimit.Check{check(keyPlan{fmt.Sprintf("own%d", own), alg, randomLimit(r, alg)})}
			default: // a composite over shared keys, a key possibly twice
				for range 2 + r.IntN(3) {
					plan[i] = append(plan[i], check(shared[r.IntN(len(shared))]))
				}
			}
		}
		type result struct {
			ok  bool
			out []ratelimit.Outcome
			err error
		}
		got := make([]result, calls)
		st.HoldBatches()
		var wg sync.WaitGroup
		for i, checks := range plan {
			wg.Go(func() {
				out := make([]ratelimit.Outcome, len(checks))
				ok, err := st.ApplyAll(t.Context(), checks, out)
				got[i] = result{ok, out, err}
			})
			waitFor(t, func() bool { return st.QueuedCalls() == i+1 })
		}
		st.ReleaseBatches()
		wg.Wait()
		for i, checks := range plan {
			out := make([]ratelimit.Outcome, len(checks))
			ok, err := mem.ApplyAll(t.Context(), checks, out)
			if ok && len(checks) > 1 {
				compositesAllowed++
			}
			if got[i].err != nil || err != nil {
				t.Fatalf("batch %d, call %d: errors %v (batched) and %v (memory)", b, i, got[i].err, err)
			}
			if got[i].ok != ok || fmt.Sprint(got[i].out) != fmt.Sprint(out) {
				t.Fatalf("batch %d, call %d, checks %+v:\nbatched %t %+v\nmemory  %t %+v", b, i, checks, got[i].ok, got[i].out, ok, out)
			}
		}
		clock.ns += r.Int64N(int64(time.Minute))
	}
	if nb, nc := st.BatchCounts(); nb != batches || nc != batches*calls {
		t.Fatalf("%d batches of %d calls, want %d of %d", nb, nc, batches, batches*calls)
	}
	t.Logf("%d composites allowed", compositesAllowed)
}

// pausableStore returns a coalescing store on addr whose client waits 30 s
// for a reply, so batches stay in flight under CLIENT PAUSE, and the check
// the pause tests take, taken once to warm the script up.
func pausableStore(t *testing.T, addr string, opts ...redisstore.Option) (*redisstore.Store, ratelimit.Check) {
	t.Helper()
	c := newClient(t, addr, func(o *redis.Options) { o.ReadTimeout = 30 * time.Second })
	st, err := redisstore.New(c, append(opts, redisstore.WithPrefix(randomPrefix(t)))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	check := ratelimit.Check{Namespace: "l", Key: "k", Algorithm: gcra.New(), Limit: ratelimit.PerHour(100), Cost: 1}
	if _, err := st.Apply(t.Context(), check); err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	return st, check
}

// spent returns how many units of check's limit of 100 the server shows
// spent.
func spent(t *testing.T, st *redisstore.Store, check ratelimit.Check) int64 {
	t.Helper()
	check.Cost = 0
	o, err := st.Apply(t.Context(), check)
	if err != nil {
		t.Fatal(err)
	}
	return 100 - o.Remaining
}

// pauseWrites pauses the writes of every client of admin's server (CLIENT
// PAUSE WRITE, for a minute at most) and returns the function that ends
// the pause; calling it again does no harm.
func pauseWrites(t *testing.T, admin *redis.Client) (unpause func()) {
	t.Helper()
	if err := admin.Do(t.Context(), "client", "pause", 60000, "write").Err(); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := admin.Do(context.Background(), "client", "unpause").Err(); err != nil {
			t.Errorf("CLIENT UNPAUSE: %v", err)
		}
	}
}
