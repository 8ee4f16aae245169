package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms/tokenbucket"
)

// sleepUntil waits until start+at.
func sleepUntil(start time.Time, at time.Duration) { time.Sleep(time.Until(start.Add(at))) }

// faultCases are the membership scenarios of TestDrift on size nodes
// under uniform load: a crash, a graceful leave, a late join (the last
// node joins the others), a burst after idleness and a partition of the
// first size/2 nodes from the rest, with its heal.
func faultCases(size int) []*driftCase {
	last := size - 1
	return []*driftCase{
		{
			// The last node stops without leaving at 0.4·T. Its port then
			// refuses connections, so the others reclaim its share as
			// soon as they detect the failure instead of holding it for
			// FailedHold (10 s in the local preset, which would be
			// r·FailedHold/N_ref under); they lose at most its unsent
			// consumption (≤ r·Δ, over).
			name: "crash", size: size, load: uniform, alg: tokenbucket.New(),
			stopAt: func(d time.Duration) map[int]time.Duration { return map[int]time.Duration{last: d * 4 / 10} },
			during: func(t *testing.T, cl *testCluster, start time.Time, d time.Duration) error {
				sleepUntil(start, d*4/10)
				return cl.snapshot()[last].Close()
			},
			check: func(t *testing.T, c *driftCase, cl *testCluster, res *runResult, d time.Duration) {
				checkReclaimed(t, cl.snapshot()[:last])
				checkDrift(t, c.name, c.size, res, d, 0.05, 0, 0, driftBurst+driftRate+envelopeExcess(c.size, syncInterval(cl.snapshot())))
			},
		},
		{
			// The last node leaves gracefully at 0.4·T: it sends its last
			// consumption first and the others reclaim its share at once.
			name: "leave", size: size, load: uniform, alg: tokenbucket.New(),
			stopAt: func(d time.Duration) map[int]time.Duration { return map[int]time.Duration{last: d * 4 / 10} },
			during: func(t *testing.T, cl *testCluster, start time.Time, d time.Duration) error {
				sleepUntil(start, d*4/10)
				n := cl.snapshot()[last]
				if err := n.Leave(time.Second); err != nil {
					return err
				}
				return n.Close()
			},
			check: standard,
		},
		{
			// The last node joins the others at 0.4·T and takes load as
			// soon as New returns: it has the cluster's counters by then.
			// The window envelope is that of size nodes plus the join term
			// r·Δ + 1.
			name: "late-join", size: size, start: size - 1, load: uniform, alg: tokenbucket.New(),
			during: func(t *testing.T, cl *testCluster, start time.Time, d time.Duration) error {
				sleepUntil(start, d*4/10)
				n, err := startNode(t, last, cl.snapshot(), nil)
				if err != nil {
					return err
				}
				cl.mu.Lock()
				cl.nodes = append(cl.nodes, n)
				cl.mu.Unlock()
				return nil
			},
			check: func(t *testing.T, c *driftCase, cl *testCluster, res *runResult, d time.Duration) {
				s := syncInterval(cl.snapshot())
				join := int64(driftRate*(2*s).Seconds()) + 1
				checkDrift(t, c.name, c.size, res, d, 0.05, 0, 0, driftBurst+driftRate+envelopeExcess(size, s)+join)
			},
		},
		{
			// Load for 1 s, silence until every view has refilled to B,
			// then every node takes B at the same instant (at 3 s).
			// The idle key gets the startup allowance again, so this is
			// the cold-start case: the window bound is the standard
			// envelope, and the total is within 5% of what the bucket
			// allows: B + r·1 s before the pause, B + r·(T − 3 s) after.
			name: "burst-after-idle", size: size, alg: tokenbucket.New(), burstAt: 3 * time.Second,
			load: func(i, size int, at time.Duration) float64 {
				if at >= time.Second && at < 3*time.Second {
					return 0
				}
				return uniform(i, size, at)
			},
			check: func(t *testing.T, c *driftCase, cl *testCluster, res *runResult, d time.Duration) {
				nodes := cl.snapshot()
				s := syncInterval(nodes)
				e := envelopeExcess(c.size, s)
				// The ideal: B + r·1 s before the pause, then the bucket
				// refills to B during it and serves B + r·(T − 3 s). The
				// total is held to the exact bucket's count of the same
				// requests, which is that unless the test process stalled.
				ideal := driftBurst + driftRate + driftBurst + int64(driftRate*(d-3*time.Second).Seconds())
				exact := res.exact
				// The package doc bounds the excess of a synchronized burst
				// on an idle key by (N−1)·r·Δ + N with the real S (b⁺ = 0
				// under the startup allowance); 5% covers it at the
				// configured S. When a starved machine stretched S, the
				// total may exceed 5% by the growth of that term.
				stretch := max(0, e-envelopeExcess(c.size, nodes[0].cfg.SyncInterval))
				got := sum(res.perNode)
				all := []int{}
				for i := range c.size {
					all = append(all, i)
				}
				t.Logf("DRIFT %-16s N=%d T=%s A=%d ideal=%d exact=%d drift=%+.2f%% maxWindow=%d cap=%d perNode=%v first1s=%d S=%s stall=%s",
					c.name, c.size, d, got, ideal, exact, 100*float64(got-exact)/float64(exact), res.maxWindow(), driftBurst+driftRate+e, res.perNode,
					res.between(all, 0, time.Second), s.Round(time.Millisecond), res.stall.Round(time.Millisecond))
				if w := res.maxWindow(); w > driftBurst+driftRate+e {
					t.Errorf("a 1 s window admitted %d, over the documented %d", w, driftBurst+driftRate+e)
				}
				if got > exact+exact/20+stretch || got < exact-exact/20 {
					t.Errorf("admitted %d, want %d −5%%/+5%%+%d (S = %s)", got, exact, stretch, s)
				}
			},
		},
		partitionCase(size),
	}
}

// checkReclaimed asserts that every node of survivors reclaimed the share
// of exactly one crashed member through its refused port (Stats.Reclaimed),
// not by FailedHold running out.
func checkReclaimed(t *testing.T, survivors []*Node) {
	t.Helper()
	for _, n := range survivors {
		if st := n.Stats(); st.Reclaimed != 1 || st.RefMembers != st.Members {
			t.Errorf("%s: %+v, want one reclaimed member and N_ref = N", n.Name(), st)
		}
	}
}

// crashCostCase is the crash cost of docs/cluster.md with the LAN preset's
// timings (on loopback) at 4 nodes: the last node stops without leaving at
// T/10 and the run lasts at least 20 s (60 s in the soak), so a share held
// for the preset's FailedHold of 30 s would be held to the end of the run,
// −12.5% over 60 s (r·FailedHold/N_ref). The stated bound is
// r·D_c/N_ref under, D_c the delay from the failure's detection to a
// refused dial, well under a second: a crash must cost at most 2% of the
// exact count, beyond the unsent consumption over.
func crashCostCase() *driftCase {
	const size = 4
	last := size - 1
	crashAt := func(d time.Duration) time.Duration { return d / 10 }
	return &driftCase{
		name: "crash-lan", size: size, load: uniform, alg: tokenbucket.New(), d: max(driftDuration(), 20*time.Second),
		mut: func(*testing.T, *testCluster) func(int, *Config) {
			return func(_ int, c *Config) {
				lan := DefaultLANConfig()
				lan.Name, lan.Label, lan.Seeds = c.Name, c.Label, c.Seeds
				lan.BindAddr, lan.BindPort = c.BindAddr, c.BindPort
				*c = lan
			}
		},
		stopAt: func(d time.Duration) map[int]time.Duration { return map[int]time.Duration{last: crashAt(d)} },
		during: func(t *testing.T, cl *testCluster, start time.Time, d time.Duration) error {
			sleepUntil(start, crashAt(d))
			return cl.snapshot()[last].Close()
		},
		check: func(t *testing.T, c *driftCase, cl *testCluster, res *runResult, d time.Duration) {
			nodes := cl.snapshot()
			checkReclaimed(t, nodes[:last])
			held := driftRate * nodes[0].cfg.FailedHold.Seconds() / size
			t.Logf("holding the crashed share for FailedHold = %s would cost r·FailedHold/N_ref = %.0f units, %.1f%% of B + r·60s",
				nodes[0].cfg.FailedHold, held, 100*held/(driftBurst+driftRate*60))
			// Over: the standard 5% and envelope. Under: 2% in all.
			checkDrift(t, c.name, c.size, res, d, 0.05, 0, 0, driftBurst+driftRate+envelopeExcess(size, syncInterval(nodes)))
			if got, floor := sum(res.perNode), res.exact-res.exact/50; got < floor {
				t.Errorf("admitted %d after a crash, under the 2%% floor %d of exact %d", got, floor, res.exact)
			}
		},
	}
}

// partitionCase runs for 15 s (60 s in the soak) on size nodes and cuts
// the first size/2 ({0,1} of 5, {0} of 3) from the others from 3 s to 12 s
// (from 20 s to 40 s in the soak). Failed members are held in N_ref for
// longer than the partition, so each side refills at r·|side|/size once it
// has detected the cut. Until detection (F, measured
// here and bounded in docs/cluster.md) both sides admit the full rate: the
// documented partition excess is (p−1)·r·F.
func partitionCase(size int) *driftCase {
	cutAt := func(d time.Duration) (time.Duration, time.Duration) {
		if d >= 60*time.Second {
			return 20 * time.Second, 40 * time.Second
		}
		return 3 * time.Second, 12 * time.Second
	}
	// maxDetect bounds the measured F by the cut's length. The bound of
	// docs/cluster.md is 5.6 s for N = 5 and 4.8 s for N = 3 while memberlist's
	// health multiplier a is 1, but a side of one backs off (a up to 8)
	// and a starved machine adds its delays: 6.5 s was measured.
	const maxDetect = 9 * time.Second
	var sides [2][]int
	for i := range size {
		side := 0
		if i >= size/2 {
			side = 1
		}
		sides[side] = append(sides[side], i)
	}
	return &driftCase{
		name: "partition", size: size, load: uniform, alg: tokenbucket.New(), d: max(driftDuration(), 15*time.Second),
		mut: func(t *testing.T, cl *testCluster) func(int, *Config) {
			ts, mut := withDropTransports(t, size)
			cl.transports = ts
			return func(i int, c *Config) {
				c.FailedHold = 5 * time.Minute
				mut(i, c)
			}
		},
		during: func(t *testing.T, cl *testCluster, start time.Time, d time.Duration) error {
			from, to := cutAt(d)
			sleepUntil(start, from)
			nodes := cl.snapshot()
			for _, a := range sides[0] {
				for _, b := range sides[1] {
					cl.transports[a].block(nodes[b].Addr())
					cl.transports[b].block(nodes[a].Addr())
				}
			}
			// Measure F: until every node sees only its own side.
			err := waitE(to-from, func() string {
				for _, side := range sides {
					for _, i := range side {
						if got := len(nodes[i].Members()); got != len(side) {
							return fmt.Sprintf("node %d sees %d members, want %d", i, got, len(side))
						}
					}
				}
				return ""
			})
			cl.mu.Lock()
			cl.detected = time.Since(start.Add(from))
			cl.mu.Unlock()
			if err != nil {
				return fmt.Errorf("the cut was not detected: %w", err)
			}
			sleepUntil(start, to)
			for _, tr := range cl.transports {
				tr.heal()
			}
			// After the heal the sides merge again, and every node
			// catches up with every origin's counter as it stood at the
			// heal within S + PushPullInterval of the merge.
			own := map[string]map[string]uint64{}
			for _, n := range nodes {
				for key, comps := range n.counters("drift") {
					if own[key] == nil {
						own[key] = map[string]uint64{}
					}
					own[key][n.Name()] = comps[n.Name()]
				}
			}
			if err := waitE(10*time.Second, membersCond(nodes, size)); err != nil {
				return err
			}
			return waitE(2*time.Second, func() string { return caughtUp(nodes, own) })
		},
		check: func(t *testing.T, c *driftCase, cl *testCluster, res *runResult, d time.Duration) {
			from, to := cutAt(d)
			cl.mu.Lock()
			f := cl.detected
			cl.mu.Unlock()
			// F is memberlist's failure detection across the cut (see
			// maxDetect and docs/cluster.md).
			t.Logf("F = %s (every node saw the cut)", f)
			if f > maxDetect {
				t.Errorf("the cut took %s to detect, over %s", f, maxDetect)
			}
			// Until detection both sides admit the full rate, (p−1)·r·F
			// over at most; the heal charges each side the other's excess
			// beyond its estimated share, and the repayment (which may
			// still run at T) mirrors it.
			over := int64(driftRate * f.Seconds())
			checkDrift(t, c.name, c.size, res, d, 0.05, over, over, 0)
			// Each side's views refill at r at most until they detect
			// the cut and at r·|side|/N_ref after, and demand exceeds
			// that, so over the cut a side admits between r·|side|/N_ref
			// per second and that plus (1 − |side|/N_ref)·r·F. (The view
			// of the side's last node to detect the cut keeps the extra
			// refill it had until then, and spends it after F; a side's
			// rate is therefore not r·|side|/N_ref from F on.) Slack: 5%
			// and half a burst.
			for b := 0; b+10 <= len(res.buckets); b += 10 {
				at := time.Duration(b) * bucketSpan
				t.Logf("t=%s..+1s: side %v admitted %d, side %v %d", at, sides[0], res.between(sides[0], at, at+time.Second), sides[1], res.between(sides[1], at, at+time.Second))
			}
			for _, side := range sides {
				frac := float64(len(side)) / float64(size)
				lo := int64(driftRate * (to - from).Seconds() * frac)
				hi := lo + int64(driftRate*f.Seconds()*(1-frac))
				slack := hi/20 + driftBurst/2
				got := res.between(side, from, to)
				t.Logf("side %v admitted %d while cut, want %d..%d (± %d)", side, got, lo, hi, slack)
				if got < lo-slack || got > hi+slack {
					t.Errorf("side %v admitted %d while cut, want %d..%d ± %d", side, got, lo, hi, slack)
				}
			}
		},
	}
}

// caughtUp returns "" when every node's view of every origin's counter
// is at least that origin's own counter in own (key → origin → count).
func caughtUp(nodes []*Node, own map[string]map[string]uint64) string {
	for _, n := range nodes {
		view := n.counters("drift")
		for key, origins := range own {
			for origin, want := range origins {
				if got := view[key][origin]; got < want {
					return fmt.Sprintf("key %q: %s sees %d from %s, want ≥ %d", key, n.Name(), got, origin, want)
				}
			}
		}
	}
	return ""
}
