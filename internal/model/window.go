package model

import (
	"math"
	"math/big"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// windowed returns l as the window algorithms run it: one window of
// W = Burst·Period/Count (rounded up when not whole) admitting Burst, so
// the long-run rate is Count per Period. It is computed with math/big,
// independently of the algorithms' 128-bit arithmetic.
func windowed(l ratelimit.Limit) ratelimit.Limit {
	w := new(big.Int).Mul(big.NewInt(l.Burst), big.NewInt(int64(l.Period)))
	w.Add(w, big.NewInt(l.Count-1))
	w.Quo(w, big.NewInt(l.Count))
	return ratelimit.Limit{Count: l.Burst, Period: time.Duration(w.Int64()), Burst: l.Burst}
}

// earliest is the instant before which the algorithms treat time as this
// instant.
const earliest = -1 << 62

// sat returns a+b for non-negative a and b as a duration, saturating at
// ratelimit.Never.
func sat(a, b int64) time.Duration {
	if a > math.MaxInt64-b {
		return ratelimit.Never
	}
	return time.Duration(a + b)
}

// floorDiv returns floor(a/b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// FixedWindow is a fixed window counter simulated window by window: load
// is the count of window win (index since the epoch, W = Burst·Period/Count
// wide; Apply rewrites L as that one window); moving
// to the next window carries max(0, load−Burst) over. Instants before the
// window of the last change are treated as its start. The zero value with
// L set is the initial state.
type FixedWindow struct {
	L    ratelimit.Limit
	win  int64 // window index of load
	load int64
}

// loadAt returns the load in window w >= m.win.
func (m *FixedWindow) loadAt(w int64) int64 {
	load := m.load
	for i := m.win; i < w && load > 0; i++ {
		load = max(0, load-m.L.Burst)
	}
	return load
}

// Apply runs op on the model and returns the expected outcome.
func (m *FixedWindow) Apply(op Op) ratelimit.Outcome {
	m.L = windowed(m.L)
	p := int64(m.L.Period)
	now := max(op.Now, earliest)
	var skew int64
	if m.load > 0 && now < m.win*p {
		skew, now = m.win*p-now, m.win*p
	}
	w := floorDiv(now, p)
	if m.load == 0 {
		m.win = w
	}
	load := m.loadAt(w)
	// untilFits returns the wait from op.Now until x more units fit with
	// load in window w, searching window by window.
	untilFits := func(load, x int64) time.Duration {
		for j := int64(0); ; j++ {
			l := load
			for range j {
				l = max(0, l-m.L.Burst)
			}
			if l+x <= m.L.Burst {
				if j == 0 {
					return 0
				}
				return sat(j*p-(now-w*p), skew)
			}
		}
	}
	describe := func(load int64, has bool) ratelimit.Outcome {
		o := ratelimit.Outcome{Remaining: max(0, m.L.Burst-load)}
		if load > 0 {
			o.ResetAfter = untilFits(load, m.L.Burst)
		}
		if has {
			o.TTL = o.ResetAfter
		}
		return o
	}
	has := load > 0
	o := describe(load, has)
	c := op.Cost
	switch op.Kind {
	case ratelimit.OpTake:
		switch {
		case c > m.L.Burst:
			o.RetryAfter = ratelimit.Never
		case c == 0 || load+c > m.L.Burst:
			o.RetryAfter = untilFits(load, max(c, 1))
			o.Allowed = c == 0 && o.RetryAfter == 0
		default:
			m.win, m.load = w, load+c
			o = describe(m.load, true)
			o.Allowed, o.Changed = true, true
		}
		return o
	case ratelimit.OpCharge:
		if c > 0 {
			// The documented cap: Burst·(MaxWindowSpan/Period + 1).
			limit := m.L.Burst * (int64(ratelimit.MaxWindowSpan/m.L.Period) + 1)
			if limit < 0 || limit > 1<<62 || limit/m.L.Burst != int64(ratelimit.MaxWindowSpan/m.L.Period)+1 {
				limit = 1 << 62
			}
			changed := m.win != w || m.load != min(load+c, limit)
			m.win, m.load = w, min(load+c, limit)
			o = describe(m.load, true)
			o.Changed = changed
		}
		o.RetryAfter = untilFits(m.loadAt(w), 1)
		o.Allowed = o.RetryAfter == 0
		return o
	}
	panic("model: unsupported op")
}

// SlidingWindow is a sliding window counter kept as a count per window
// index, windows W = Burst·Period/Count wide (Apply rewrites L as that one
// window, so Period below is W). Its estimate at t is count[w] + ceil(count[w−1]·(Period−el)/Period)
// for the window w of t and el = t − w·Period, computed with big.Rat; its
// waits are found by binary search over instants, independently of the
// closed forms the algorithm uses. Instants before the window of the last
// change are treated as its start. The zero value with L set is the
// initial state.
type SlidingWindow struct {
	L       ratelimit.Limit
	counts  map[int64]int64
	lastWin int64
	written bool
}

func (m *SlidingWindow) estimate(t *big.Int) int64 {
	p := big.NewInt(int64(m.L.Period))
	w, el := new(big.Int).DivMod(t, p, new(big.Int)) // floor division, el in [0, p)
	var cur, prev int64
	if w.IsInt64() { // nothing is counted past the last int64 instant
		cur, prev = m.counts[w.Int64()], m.counts[w.Int64()-1]
	}
	r := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(prev), new(big.Int).Sub(p, el)), p)
	return cur + Ceil(r)
}

// passes reports whether x more units pass at t.
func (m *SlidingWindow) passes(t *big.Int, x int64) bool { return m.estimate(t)+x <= m.L.Burst }

// until returns the smallest d >= 0 such that x passes at t+d, by binary
// search (the estimate never grows while nothing is added).
func (m *SlidingWindow) until(t, x int64) int64 {
	at := func(d int64) *big.Int { return new(big.Int).Add(big.NewInt(t), big.NewInt(d)) }
	if m.passes(at(0), x) {
		return 0
	}
	lo, hi := int64(0), 2*int64(m.L.Period) // passes(t+hi) holds: both windows are new
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if m.passes(at(mid), x) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// Apply runs op on the model and returns the expected outcome.
func (m *SlidingWindow) Apply(op Op) ratelimit.Outcome {
	m.L = windowed(m.L)
	if m.counts == nil {
		m.counts = map[int64]int64{}
	}
	p := int64(m.L.Period)
	now := max(op.Now, earliest)
	var skew int64
	if m.written && now < m.lastWin*p {
		skew, now = m.lastWin*p-now, m.lastWin*p
	}
	w := floorDiv(now, p)
	describe := func() ratelimit.Outcome {
		o := ratelimit.Outcome{Remaining: max(0, m.L.Burst-m.estimate(big.NewInt(now)))}
		switch {
		case m.counts[w] > 0:
			o.ResetAfter = sat(2*p-(now-w*p), skew)
		case m.counts[w-1] > 0:
			o.ResetAfter = sat(p-(now-w*p), skew)
		}
		o.TTL = o.ResetAfter
		return o
	}
	wait := func(x int64) time.Duration {
		if d := m.until(now, x); d > 0 {
			return sat(d, skew)
		}
		return 0
	}
	has := m.counts[w] > 0 || m.counts[w-1] > 0
	o := describe()
	if !m.written {
		o.TTL = 0
	}
	c := op.Cost
	switch op.Kind {
	case ratelimit.OpTake:
		switch {
		case c > m.L.Burst:
			o.RetryAfter = ratelimit.Never
		case c == 0 || !m.passes(big.NewInt(now), c):
			o.RetryAfter = wait(max(c, 1))
			o.Allowed = c == 0 && o.RetryAfter == 0
		default:
			m.counts[w] += c
			m.lastWin, m.written = w, true
			o = describe()
			o.Allowed, o.Changed = true, true
		}
		return o
	case ratelimit.OpCharge:
		if c > 0 {
			before := m.counts[w]
			m.counts[w] = min(before+c, 1<<61)
			o.Changed = m.counts[w] != before || m.lastWin != w || !has
			m.lastWin, m.written = w, true
			changed := o.Changed
			o = describe()
			o.Changed = changed
		}
		o.RetryAfter = wait(1)
		o.Allowed = o.RetryAfter == 0
		return o
	}
	panic("model: unsupported op")
}

// SlidingLog is an exact sliding log kept as a list of (instant, count)
// entries, over a window W = Burst·Period/Count (Apply rewrites L as that
// one window, so Period below is W). Units logged at ts count at t while t − Period < ts. Its waits
// are found by trying each instant at which an entry expires, in order, and
// counting again; instants before the last entry are treated as it. The
// zero value with L set is the initial state.
type SlidingLog struct {
	L       ratelimit.Limit
	ts, cnt []int64
}

// usedAt counts the units logged in (t−Period, t].
func (m *SlidingLog) usedAt(t int64) int64 {
	var n int64
	for i, ts := range m.ts {
		if ts > t-int64(m.L.Period) && ts <= t {
			n += m.cnt[i]
		}
	}
	return n
}

// usedAfter counts the units that still count when the entry at ts stops
// counting, at ts + Period: those logged in (ts, ts+Period].
func (m *SlidingLog) usedAfter(ts int64) int64 {
	var n int64
	for i, e := range m.ts {
		if e > ts && uint64(e-ts) <= uint64(m.L.Period) {
			n += m.cnt[i]
		}
	}
	return n
}

// Apply runs op on the model and returns the expected outcome.
func (m *SlidingLog) Apply(op Op) ratelimit.Outcome {
	m.L = windowed(m.L)
	p := int64(m.L.Period)
	now, skew := max(op.Now, earliest), int64(0)
	if n := len(m.ts); n > 0 && now < m.ts[n-1] {
		skew, now = m.ts[n-1]-now, m.ts[n-1]
	}
	used := m.usedAt(now)
	until := func(x int64) time.Duration {
		if used+x <= m.L.Burst {
			return 0
		}
		for _, ts := range m.ts {
			// ts stops counting at ts + p, which may lie past int64.
			if age := uint64(now - ts); age < uint64(p) && m.usedAfter(ts)+x <= m.L.Burst {
				return sat(p-int64(age), skew)
			}
		}
		panic("model: never fits")
	}
	describe := func(used int64) ratelimit.Outcome {
		o := ratelimit.Outcome{Remaining: max(0, m.L.Burst-used)}
		if used > 0 {
			o.ResetAfter = sat(p-(now-m.ts[len(m.ts)-1]), skew)
			o.TTL = o.ResetAfter
		}
		return o
	}
	o := describe(used)
	c := op.Cost
	if op.Kind != ratelimit.OpTake {
		panic("model: unsupported op")
	}
	switch {
	case c > m.L.Burst:
		o.RetryAfter = ratelimit.Never
	case c == 0 || used+c > m.L.Burst:
		o.RetryAfter = until(max(c, 1))
		o.Allowed = c == 0 && o.RetryAfter == 0
	default:
		m.ts = append(m.ts, now)
		m.cnt = append(m.cnt, c)
		o = describe(used + c)
		o.Allowed, o.Changed = true, true
	}
	return o
}
