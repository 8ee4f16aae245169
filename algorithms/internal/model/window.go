package model

import (
	"math/big"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// floorDiv returns floor(a/b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// FixedWindow is a fixed window counter simulated window by window: load
// is the count of window win (index since the epoch, Period wide); moving
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
	p := int64(m.L.Period)
	now := op.Now
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
				return time.Duration((w+j)*p - now + skew)
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
// index. Its estimate at t is count[w] + ceil(count[w−1]·(Period−el)/Period)
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

func (m *SlidingWindow) estimate(t int64) int64 {
	p := int64(m.L.Period)
	w := floorDiv(t, p)
	el := t - w*p
	r := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(m.counts[w-1]), big.NewInt(p-el)), big.NewInt(p))
	return m.counts[w] + Ceil(r)
}

// passes reports whether x more units pass at t.
func (m *SlidingWindow) passes(t, x int64) bool { return m.estimate(t)+x <= m.L.Burst }

// until returns the smallest d >= 0 such that x passes at t+d, by binary
// search (the estimate never grows while nothing is added).
func (m *SlidingWindow) until(t, x int64) int64 {
	if m.passes(t, x) {
		return 0
	}
	lo, hi := int64(0), 2*int64(m.L.Period) // passes(t+hi) holds: both windows are new
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if m.passes(t+mid, x) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// Apply runs op on the model and returns the expected outcome.
func (m *SlidingWindow) Apply(op Op) ratelimit.Outcome {
	if m.counts == nil {
		m.counts = map[int64]int64{}
	}
	p := int64(m.L.Period)
	now := op.Now
	var skew int64
	if m.written && now < m.lastWin*p {
		skew, now = m.lastWin*p-now, m.lastWin*p
	}
	w := floorDiv(now, p)
	describe := func() ratelimit.Outcome {
		o := ratelimit.Outcome{Remaining: max(0, m.L.Burst-m.estimate(now))}
		switch {
		case m.counts[w] > 0:
			o.ResetAfter = time.Duration(2*p - (now - w*p) + skew)
		case m.counts[w-1] > 0:
			o.ResetAfter = time.Duration(p - (now - w*p) + skew)
		}
		o.TTL = o.ResetAfter
		return o
	}
	wait := func(x int64) time.Duration {
		if d := m.until(now, x); d > 0 {
			return time.Duration(d + skew)
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
		case c == 0 || !m.passes(now, c):
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
// entries. Units logged at ts count at t while t − Period < ts. Its waits
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

// Apply runs op on the model and returns the expected outcome.
func (m *SlidingLog) Apply(op Op) ratelimit.Outcome {
	p := int64(m.L.Period)
	now, skew := op.Now, int64(0)
	if n := len(m.ts); n > 0 && now < m.ts[n-1] {
		skew, now = m.ts[n-1]-now, m.ts[n-1]
	}
	used := m.usedAt(now)
	until := func(x int64) time.Duration {
		if used+x <= m.L.Burst {
			return 0
		}
		for _, ts := range m.ts {
			if t := ts + p; t > now && m.usedAt(t)+x <= m.L.Burst {
				return time.Duration(t - now + skew)
			}
		}
		panic("model: never fits")
	}
	describe := func(used int64) ratelimit.Outcome {
		o := ratelimit.Outcome{Remaining: max(0, m.L.Burst-used)}
		if used > 0 {
			o.ResetAfter = time.Duration(m.ts[len(m.ts)-1] + p - now + skew)
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
