package redisstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/backends/redisstore"
	"github.com/sluicehq/sluice/internal/latency"
)

// defaultBudget is sluice's budget for a rule that sets none on a store
// without ratelimit.Budgeter, which redisstore is.
const defaultBudget = 5 * time.Millisecond

// budgetSlack is how far past its budget a call may return: the bound the
// failure budget promises (issue 13: "within budget + 5 ms").
const budgetSlack = 5 * time.Millisecond

// decider is one decision of a Limiter or a Composite.
type decider func(ctx context.Context) (sluice.Decision, error)

// budgetShape builds a Limiter or a three-rule Composite on st with the
// given failure policy, returning its decider and a counter of the
// observer's calls that masked a store error with a policy decision.
type budgetShape struct {
	name string
	new  func(t *testing.T, st *redisstore.Store, failOpen bool) (decider, *atomic.Int64)
}

// budgetBurst is the burst of budgetRules, which refill one unit an hour:
// the test never exhausts them, and what the server spent shows in
// Remaining.
const budgetBurst = 100000

// budgetRules returns three rules with a limit the test never exhausts.
func budgetRules(failOpen bool) []sluice.Rule {
	rules := make([]sluice.Rule, 3)
	for i, name := range []string{"per-ip", "per-user", "global"} {
		rules[i] = sluice.Rule{Name: name, Algorithm: gcra.New(), Limit: sluice.Limit{Count: 1, Period: time.Hour, Burst: budgetBurst}, FailOpen: failOpen}
	}
	return rules
}

// countMasked returns an observer counting policy decisions that carry the
// store error they masked.
func countMasked(n *atomic.Int64) sluice.Option {
	return sluice.WithObserver(func(_ context.Context, _ string, d sluice.Decision, err error) {
		if d.ByPolicy && err != nil {
			n.Add(1)
		}
	})
}

func budgetShapes() []budgetShape {
	return []budgetShape{
		{"limiter", func(t *testing.T, st *redisstore.Store, failOpen bool) (decider, *atomic.Int64) {
			masked := new(atomic.Int64)
			lim, err := sluice.New(budgetRules(failOpen)[0], sluice.WithStore(st), countMasked(masked))
			if err != nil {
				t.Fatal(err)
			}
			return func(ctx context.Context) (sluice.Decision, error) { return lim.Allow(ctx, "10.0.0.1") }, masked
		}},
		{"composite", func(t *testing.T, st *redisstore.Store, failOpen bool) (decider, *atomic.Int64) {
			masked := new(atomic.Int64)
			comp, err := sluice.NewComposite(budgetRules(failOpen), sluice.WithStore(st), countMasked(masked))
			if err != nil {
				t.Fatal(err)
			}
			return func(ctx context.Context) (sluice.Decision, error) {
				return comp.AllowN(ctx, 1, "10.0.0.2", "alice", "all") // keys of its own
			}, masked
		}},
	}
}

// TestBudgetUnderClientPause stalls Redis with CLIENT PAUSE WRITE, which
// holds every script (EVAL and EVALSHA without the no-writes flag) while
// letting connection set-up and CLIENT UNPAUSE through. (PAUSE ALL also
// holds CLIENT UNPAUSE on Redis 7.0, so the test could not end it on
// demand.) During the pause, 100 calls of each rule, with a 10 ms caller
// deadline and with none, are answered by the failure policy within the
// rule's budget plus 5 ms: fail-open allows, fail-closed denies with a
// typed error, and the observer sees every masked failure. After CLIENT
// UNPAUSE the same Limiter or Composite decides from the store again.
func TestBudgetUnderClientPause(t *testing.T) {
	if raceEnabled {
		t.Skip("the budget bound is a latency measurement and the race detector slows every goroutine several times; .ci/run runs it without -race, alone")
	}
	probe := latency.Start()
	t.Cleanup(probe.Stop)
	srv := startServer(t)
	admin := newClient(t, srv.addr())
	modes := []clientMode{
		{"plain", nil},
		{"autopipeline", []redisstore.Option{redisstore.WithAutoPipeline(nil)}},
	}
	for _, mode := range modes {
		t.Run("client="+mode.name, func(t *testing.T) {
			// The autopipeliner's connection must outlive the pause: its
			// reader fails every queued call after ReadTimeout.
			c := newClient(t, srv.addr(), func(o *redis.Options) { o.ReadTimeout = 30 * time.Second })
			st, err := redisstore.New(c, append(mode.opts, redisstore.WithPrefix(randomPrefix(t)))...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			for _, shape := range budgetShapes() {
				t.Run("shape="+shape.name, func(t *testing.T) {
					testBudgetUnderPause(t, admin, st, shape, probe)
				})
			}
		})
	}
}

func testBudgetUnderPause(t *testing.T, admin *redis.Client, st *redisstore.Store, shape budgetShape, probe *latency.Probe) {
	open, openMasked := shape.new(t, st, true)
	closed, closedMasked := shape.new(t, st, false)
	for name, call := range map[string]decider{"fail-open": open, "fail-closed": closed} {
		// A warm-up call loads the script and opens a connection, so the
		// calls under the pause meet only the stall.
		waitForStore(t, name+" before the pause", call)
	}

	unpause := pauseWrites(t, admin)
	defer unpause()

	bound := defaultBudget + budgetSlack
	for _, policy := range []struct {
		name   string
		open   bool
		call   decider
		masked *atomic.Int64
	}{{"fail-open", true, open, openMasked}, {"fail-closed", false, closed, closedMasked}} {
		for _, deadline := range []time.Duration{10 * time.Millisecond, 0} {
			masked0 := policy.masked.Load()
			classes := map[string]int{}
			report := latency.RunBudget(t, latency.Budget{Name: policy.name, Deadline: deadline, Bound: bound, Probe: probe}, policy.call,
				func(prefix string, d sluice.Decision, err error) {
					if !d.ByPolicy || d.Allowed != policy.open {
						t.Errorf("%s: %+v (err %v), want a policy decision with Allowed %v", prefix, d, err, policy.open)
					}
					switch {
					case policy.open && err != nil:
						t.Errorf("%s: error %v, want nil", prefix, err)
					case !policy.open && errors.Is(err, sluice.ErrUnknownOutcome):
						classes["unknown outcome"]++
					case !policy.open && errors.Is(err, sluice.ErrUnavailable):
						classes["unavailable"]++
					case !policy.open:
						t.Errorf("%s: error %v, want ErrUnknownOutcome or ErrUnavailable", prefix, err)
					}
				})
			if n := policy.masked.Load() - masked0; n != latency.BudgetCalls*observedPerCall(shape) {
				t.Errorf("%s, deadline %s: the observer saw %d masked failures, want %d", policy.name, deadline, n, latency.BudgetCalls*observedPerCall(shape))
			}
			t.Logf("%s; errors %v", report, classes)
		}
	}

	unpause()
	waitForStore(t, "fail-closed after CLIENT UNPAUSE", closed)
	d := waitForStore(t, "fail-open after CLIENT UNPAUSE", open)
	// Calls that gave up with an unknown outcome may have run once the
	// pause ended: the autopipeliner still held them, or Redis had read
	// them before their connection closed. Report how many did.
	storeDecided := int64(4) // two warm-ups, two calls after the pause (more if they had to retry)
	t.Logf("after the pause: about %d of the %d calls past their budget were applied by the server", budgetBurst-d.Remaining-storeDecided, 4*latency.BudgetCalls)
}

// observedPerCall is how many times the observer runs for one call: once
// per rule.
func observedPerCall(shape budgetShape) int64 {
	if shape.name == "composite" {
		return 3
	}
	return 1
}

// waitForStore calls call until the store, not the failure policy,
// decides (for at most 10 s), and returns that decision; it fails t
// otherwise.
func waitForStore(t *testing.T, what string, call decider) sluice.Decision {
	t.Helper()
	var (
		d   sluice.Decision
		err error
	)
	for range 1000 {
		d, err = call(t.Context())
		if err == nil && !d.ByPolicy {
			if !d.Allowed {
				t.Fatalf("%s: the store denied (%+v); the limit should not run out", what, d)
			}
			return d
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: the store did not decide within 10 s: last %+v, %v", what, d, err)
	return d
}
