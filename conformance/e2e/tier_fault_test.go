package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/conformance/e2e/testenv"
	"github.com/sluicehq/sluice/tier"
)

// tierPhase counts the decisions of one rule in one phase of the fault
// test.
type tierPhase struct {
	admitted, denied       int // decided by the store or the tier
	policyAllow, policyDen int // decided by the failure policy
	errors                 int // errors other than a fail-closed policy's
	slowest                time.Duration
	slowestAt              time.Duration // before the end of the phase
}

func (p tierPhase) String() string {
	return fmt.Sprintf("admitted %d, denied %d, by policy allowed %d denied %d, other errors %d, slowest call %s (%s before the end)",
		p.admitted, p.denied, p.policyAllow, p.policyDen, p.errors, p.slowest, p.slowestAt)
}

// TestTierRedisKilled kills Redis under two rules decorated in Lease and
// in Sync mode, one failing open and one closed: each keeps deciding from
// what it holds, then its failure policy answers, no call waits longer
// than its budget, and decisions come from Redis again once it is back.
func TestTierRedisKilled(t *testing.T) {
	if tierRaceEnabled {
		t.Skip("a timing measurement: skipped under -race (.ci/run runs it without)")
	}
	for _, mode := range []tier.Mode{tier.Lease, tier.Sync} {
		t.Run("mode="+mode.String(), func(t *testing.T) {
			srv := testenv.NewRedis(t)
			prefix := redisPrefix(t)
			backing := func(t *testing.T) ratelimit.Store {
				st, _ := newRedisStore(t, srv, prefix)
				return st
			}
			runTierKilled(t, mode, backing, srv)
		})
	}
}

// TestTierPostgresKilled is TestTierRedisKilled on PostgreSQL, crashed
// and restarted.
func TestTierPostgresKilled(t *testing.T) {
	if tierRaceEnabled {
		t.Skip("a timing measurement: skipped under -race (.ci/run runs it without)")
	}
	for _, mode := range []tier.Mode{tier.Lease, tier.Sync} {
		t.Run("mode="+mode.String(), func(t *testing.T) {
			srv := testenv.NewPostgres(t)
			table := uniqueName(t, "tier_")
			backing := func(t *testing.T) ratelimit.Store {
				st := openPgStore(t, srv.DSN, table)
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				if err := st.Migrate(ctx); err != nil {
					t.Fatal(err)
				}
				return st
			}
			runTierKilled(t, mode, backing, srv)
		})
	}
}

// runTierKilled takes srv down and back under a fail-open and a
// fail-closed rule decorated in mode over stores newBacking returns.
func runTierKilled(t *testing.T, mode tier.Mode, newBacking func(t *testing.T) ratelimit.Store, srv *testenv.Server) {
	const budget = 100 * time.Millisecond
	// A slack for the scheduling of a loaded 2-core machine: the
	// bound is the budget, not a latency target.
	const slack = 200 * time.Millisecond
	for _, failOpen := range []bool{true, false} {
		name := map[bool]string{true: "open", false: "closed"}[failOpen]
		t.Run("policy="+name, func(t *testing.T) {
			st, err := tier.New(newBacking(t), tier.WithProbeInterval(50*time.Millisecond),
				tier.WithRule(name, tier.Rule{Mode: mode, Nodes: 2, SyncInterval: 25 * time.Millisecond}))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			lim, err := sluice.New(sluice.Rule{Name: name, Algorithm: gcra.New(), Limit: sluice.PerSecond(1000),
				FailOpen: failOpen, Budget: budget}, sluice.WithStore(st))
			if err != nil {
				t.Fatal(err)
			}
			// One call first: a new connection and the script load
			// may take longer than the budget on a busy machine, and the
			// server may just have come back for the previous subtest.
			for deadline := time.Now().Add(10 * time.Second); ; {
				dec, err := lim.Allow(context.Background(), "k")
				if err == nil && !dec.ByPolicy {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("warming up: %+v %v", dec, err)
				}
				time.Sleep(100 * time.Millisecond) // waiting for a server coming back: no event to wait on
			}
			run := func(d time.Duration, perTick int) tierPhase {
				var p tierPhase
				end := time.Now().Add(d)
				tick := time.NewTicker(2 * time.Millisecond)
				defer tick.Stop()
				for i := 0; time.Now().Before(end); i++ {
					if i%perTick == 0 {
						<-tick.C
					}
					start := time.Now()
					dec, err := lim.Allow(context.Background(), "k")
					if took := time.Since(start); took > p.slowest {
						p.slowest = took
						p.slowestAt = time.Until(end)
					}
					switch {
					case dec.ByPolicy && dec.Allowed:
						p.policyAllow++
					case dec.ByPolicy:
						p.policyDen++
					case err != nil:
						p.errors++
					case dec.Allowed:
						p.admitted++
					default:
						p.denied++
					}
				}
				return p
			}
			// 500 requests per second, half the rate: leases grow and
			// views hold a slice. While Redis is down, 2000 per second:
			// more than a slice holds.
			before := run(time.Second, 1)
			held := st.Stats()
			srv.Stop(t)
			down := run(time.Second, 4)
			srv.Start(t)
			up := run(time.Second, 1)
			after := st.Stats()
			t.Logf("before: %v", before)
			t.Logf("held at the kill: %d leased, %d unpushed, %d in slices", held.HeldUnits, held.UnpushedUnits, held.SliceUnits)
			t.Logf("down:   %v", down)
			t.Logf("up:     %v", up)
			t.Logf("stats: %+v", after)
			if before.policyAllow+before.policyDen+before.errors > 0 {
				t.Errorf("before the kill: %v", before)
			}
			for _, p := range []tierPhase{before, down, up} {
				if p.slowest > budget+slack {
					t.Errorf("a call took %s, over its budget %s (+%s slack)", p.slowest, budget, slack)
				}
				if p.errors > 0 {
					t.Errorf("%d calls failed outside the failure policy", p.errors)
				}
			}
			// Down: what the tier held, then the policy.
			if failOpen && down.policyAllow == 0 || !failOpen && down.policyDen == 0 {
				t.Errorf("down: the failure policy never answered: %v", down)
			}
			if !failOpen && down.policyAllow > 0 || failOpen && down.policyDen > 0 {
				t.Errorf("down: the wrong policy answered: %v", down)
			}
			// Without the store a lease spends what it holds and a view
			// what is left of its slice: no replenishment. One pull may
			// land between the snapshot and the kill.
			limit := held.HeldUnits + held.SliceUnits
			if mode == tier.Sync {
				limit += 1000 + 1000*25/1000 // B + r·S: a whole slice
			}
			if int64(down.admitted) > limit {
				t.Errorf("down: admitted %d without the store, more than held (%d)", down.admitted, limit)
			}
			// Up: the store decides again.
			if up.admitted == 0 || after.StoreErrors == 0 {
				t.Errorf("after the restart: %v (store errors %d): did not recover", up, after.StoreErrors)
			}
			if up.policyAllow+up.policyDen > down.policyAllow+down.policyDen {
				t.Errorf("after the restart the policy answered more than while down: %v", up)
			}
		})
	}
}
