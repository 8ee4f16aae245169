// Package latency helps tests that assert a latency bound tell the code's
// delay from the machine's: a Probe records when the process itself could
// not run (a descheduled VM, a busy host), so that a call over its bound
// during such a stall is reported as the machine's, and any other is a
// failure.
package latency

import (
	"slices"
	"sync"
	"time"
)

// tick is how often the probe's goroutine asks to wake up.
const tick = time.Millisecond

// Probe records stalls: spans in which its goroutine, asking to wake every
// millisecond, did not. It is safe for concurrent use.
type Probe struct {
	mu     sync.Mutex
	stalls []span
	stop   chan struct{}
	done   chan struct{}
}

type span struct{ from, to time.Time }

// Start starts a probe; Stop ends it.
func Start() *Probe {
	p := &Probe{stop: make(chan struct{}), done: make(chan struct{})}
	go p.run()
	return p
}

func (p *Probe) run() {
	defer close(p.done)
	t := time.NewTicker(tick)
	defer t.Stop()
	prev := time.Now()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			now := time.Now()
			if now.Sub(prev) > 2*tick {
				p.mu.Lock()
				p.stalls = append(p.stalls, span{prev.Add(tick), now})
				p.mu.Unlock()
			}
			prev = now
		}
	}
}

// Stop ends the probe's goroutine.
func (p *Probe) Stop() {
	close(p.stop)
	<-p.done
}

// StalledDuring returns how long, between from and to, the process could
// not run according to the probe: the total of the stalls' overlaps with
// that interval.
func (p *Probe) StalledDuring(from, to time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var total time.Duration
	for _, s := range p.stalls {
		lo, hi := s.from, s.to
		if lo.Before(from) {
			lo = from
		}
		if hi.After(to) {
			hi = to
		}
		if hi.After(lo) {
			total += hi.Sub(lo)
		}
	}
	return total
}

// Summary returns the median and the largest of durations, which it sorts.
func Summary(durations []time.Duration) (median, largest time.Duration) {
	if len(durations) == 0 {
		return 0, 0
	}
	slices.Sort(durations)
	return durations[len(durations)/2], durations[len(durations)-1]
}
