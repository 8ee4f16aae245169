package model

import (
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
