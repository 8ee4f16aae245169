package cluster

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// Drift tests: nodes of an in-process cluster on loopback serve one key
// under a load pattern; the admitted total A(T) must be within 5% of the
// exact B + r·T, two-sided, and every sliding 1 s window within the
// documented envelope B + r + E(N).

const (
	driftRate  = 100 // r, units per second
	driftBurst = 100 // B
	offered    = 3 * driftRate
	bucketSpan = 100 * time.Millisecond // resolution of the window check
)

var driftLimit = ratelimit.Limit{Count: driftRate, Period: time.Second, Burst: driftBurst}

// driftDuration is T: 10 s by default, 60 s with SLUICE_SOAK=1.
func driftDuration() time.Duration {
	if soak() {
		return 60 * time.Second
	}
	return 10 * time.Second
}

// loadFunc is the rate in requests per second offered to node i of size
// at time at since the start.
type loadFunc func(i, size int, at time.Duration) float64

var (
	uniform  loadFunc = func(i, size int, at time.Duration) float64 { return offered / float64(size) }
	eighty   loadFunc = func(i, size int, at time.Duration) float64 {
		if i == 0 {
			return 0.8 * offered
		}
		return 0.2 * offered / float64(size-1)
	}
	oneHot   loadFunc = func(i, size int, at time.Duration) float64 { return offered * b2f(i == 0) }
	rotating loadFunc = func(i, size int, at time.Duration) float64 {
		return offered * b2f(i == int(at/(2*time.Second))%size)
	}
)

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// run drives the load on every node for d and returns what was admitted,
// per node and per bucketSpan. A node whose entry in stopAt is non-zero
// stops offering load at that time; events run in their own goroutine.
type runResult struct {
	perNode []int64
	buckets []int64 // admitted per bucketSpan, all nodes
	errs    atomic.Int64
}

type scenario struct {
	nodes     func() []*Node // read at every tick: nodes may be added
	key       string
	d         time.Duration
	load      loadFunc
	coldBurst bool // every node fires B requests at t=0 at once
	stopAt    map[int]time.Duration
}

func (s scenario) run(t *testing.T) *runResult {
	t.Helper()
	const maxNodes = 8
	res := &runResult{perNode: make([]int64, maxNodes), buckets: make([]int64, int(s.d/bucketSpan)+1)}
	var admitted [maxNodes]atomic.Int64
	var buckets = make([]atomic.Int64, len(res.buckets))
	start := time.Now().Add(50 * time.Millisecond)
	var wg sync.WaitGroup
	for i := range maxNodes {
		wg.Go(func() {
			c := ratelimit.Check{Namespace: "drift", Key: s.key, Algorithm: tokenbucket.New(), Limit: driftLimit, Cost: 1}
			ctx := context.Background()
			try := func(n *Node) {
				o, err := n.Apply(ctx, c)
				if err != nil {
					res.errs.Add(1)
					return
				}
				if o.Allowed {
					at := time.Since(start)
					if at >= 0 && at < s.d {
						admitted[i].Add(1)
						buckets[int(at/bucketSpan)].Add(1)
					}
				}
			}
			time.Sleep(time.Until(start))
			credit := 0.0
			last := time.Duration(0)
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			first := true
			for {
				at := time.Since(start)
				if at >= s.d {
					return
				}
				nodes := s.nodes()
				if i < len(nodes) && (s.stopAt[i] == 0 || at < s.stopAt[i]) {
					n := nodes[i]
					if first && s.coldBurst {
						for range driftBurst {
							try(n)
						}
					}
					first = false
					credit += s.load(i, len(nodes), at) * (at - last).Seconds()
					for ; credit >= 1; credit-- {
						try(n)
					}
				} else {
					credit = 0
				}
				last = at
				<-tick.C
			}
		})
	}
	wg.Wait()
	for i := range maxNodes {
		res.perNode[i] = admitted[i].Load()
	}
	for i := range buckets {
		res.buckets[i] = buckets[i].Load()
	}
	return res
}

// maxWindow returns the most admitted in any 1 s window (sliding by
// bucketSpan).
func (r *runResult) maxWindow() int64 {
	per := int(time.Second / bucketSpan)
	var best int64
	for a := 0; a+per <= len(r.buckets); a++ {
		best = max(best, sum(r.buckets[a:a+per]))
	}
	return best
}

// envelopeExcess is E(N) of the package documentation for the test
// config: (N−1)·r·Δ with Δ = S + d, d = one more S for scheduling delay
// on a loaded machine, plus one unit per node for rounding the startup
// allowance up.
func envelopeExcess(size int, s time.Duration) int64 {
	delta := 2 * s
	return int64(math.Ceil(float64(size-1)*driftRate*delta.Seconds())) + int64(size)
}

type driftRow struct {
	name           string
	size           int
	admitted, want int64
	drift          float64
	maxWin, winCap int64
}

var (
	driftMu    sync.Mutex
	driftTable []driftRow
)

// checkDrift asserts |A − (B + r·T)| ≤ tol·(B + r·T) and the window
// envelope, and records a row for the closing table.
func checkDrift(t *testing.T, name string, size int, res *runResult, d time.Duration, tol float64, extraOver, extraUnder int64, winCap int64) {
	t.Helper()
	want := driftBurst + int64(driftRate*d.Seconds())
	got := sum(res.perNode)
	drift := float64(got-want) / float64(want)
	row := driftRow{name, size, got, want, drift * 100, res.maxWindow(), winCap}
	driftMu.Lock()
	driftTable = append(driftTable, row)
	driftMu.Unlock()
	t.Logf("DRIFT %-28s N=%d T=%s A=%d ideal=%d drift=%+.2f%% maxWindow=%d cap=%d perNode=%v errs=%d",
		name, size, d, got, want, drift*100, row.maxWin, winCap, res.perNode[:size], res.errs.Load())
	if res.errs.Load() != 0 {
		t.Errorf("%d calls failed", res.errs.Load())
	}
	slack := int64(tol * float64(want))
	if got > want+slack+extraOver || got < want-slack-extraUnder {
		t.Errorf("admitted %d, want %d ± %d (+%d/−%d scenario bound): drift %+.2f%%", got, want, slack, extraOver, extraUnder, drift*100)
	}
	if winCap > 0 && row.maxWin > winCap {
		t.Errorf("a 1 s window admitted %d, over the envelope %d", row.maxWin, winCap)
	}
}

func TestDriftPatterns(t *testing.T) {
	patterns := []struct {
		name string
		load loadFunc
		cold bool
	}{
		{"uniform", uniform, false},
		{"80-20", eighty, false},
		{"one-hot", oneHot, false},
		{"rotating-hot", rotating, false},
		{"cold-start", uniform, true},
	}
	d := driftDuration()
	for _, size := range []int{3, 5} {
		for _, p := range patterns {
			t.Run(fmt.Sprintf("%s/N=%d", p.name, size), func(t *testing.T) {
				t.Parallel()
				nodes := startCluster(t, size, nil)
				res := scenario{nodes: func() []*Node { return nodes }, key: newKey(t), d: d, load: p.load, coldBurst: p.cold}.run(t)
				s := nodes[0].cfg.SyncInterval
				checkDrift(t, p.name, size, res, d, 0.05, 0, 0, driftBurst+driftRate+envelopeExcess(size, s))
			})
		}
	}
}
