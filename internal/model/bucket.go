package model

import (
	"math/big"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// Bucket is an exact token bucket: Level tokens (a rational, negative in
// debt) at instant T, refilled at Count/Period per nanosecond up to Burst.
// Clamp selects the token bucket's rule for instants before T (they are
// treated as T); without it, the model evaluates at the given instant
// (GCRA). The zero value is a full bucket for the Limit set in L.
//
// Queue selects the leaky bucket's Reserve: the delay is the time until
// the bucket is full of tokens (empty of water) rather than until it holds
// the cost.
type Bucket struct {
	L     ratelimit.Limit
	Clamp bool
	Queue bool
	level *big.Rat // nil: full, no state
	t     int64
}

// Op is one call in a random sequence.
type Op struct {
	Now     int64
	Kind    ratelimit.Op
	Cost    int64
	MaxWait time.Duration
}

func (m *Bucket) rat(n int64) *big.Rat { return new(big.Rat).SetInt64(n) }

// at returns the level at now and the skew (how far now is before T when
// clamping).
func (m *Bucket) at(now int64) (*big.Rat, int64, int64) {
	b := m.rat(m.L.Burst)
	if m.level == nil {
		return b, now, 0
	}
	eff, skew := now, int64(0)
	if m.Clamp && now < m.t {
		eff, skew = m.t, m.t-now
	}
	d := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(eff-m.t), big.NewInt(m.L.Count)), big.NewInt(int64(m.L.Period)))
	lv := new(big.Rat).Add(m.level, d)
	if lv.Cmp(b) > 0 {
		lv = b
	}
	if d := m.rat(-m.maxDebt()); lv.Cmp(d) < 0 {
		lv = d // only reachable going back in time without Clamp
	}
	return lv, eff, skew
}

// Floor returns floor(r).
func Floor(r *big.Rat) int64 {
	q := new(big.Int).Div(r.Num(), r.Denom()) // Euclidean: floor for positive denominators
	return q.Int64()
}

// Ceil returns ceil(r).
func Ceil(r *big.Rat) int64 { return -Floor(new(big.Rat).Neg(r)) }

// wait returns ceil((x − level)·Period/Count) + skew, or 0.
func (m *Bucket) wait(lv *big.Rat, x, skew int64) time.Duration {
	need := new(big.Rat).Sub(m.rat(x), lv)
	if need.Sign() <= 0 {
		return 0
	}
	need.Mul(need, new(big.Rat).SetFrac64(int64(m.L.Period), m.L.Count))
	return time.Duration(Ceil(need) + skew)
}

func (m *Bucket) describe(lv *big.Rat, skew int64, hasState bool) ratelimit.Outcome {
	o := ratelimit.Outcome{Remaining: max(0, Floor(lv))}
	o.ResetAfter = m.wait(lv, m.L.Burst, skew)
	if hasState {
		o.TTL = o.ResetAfter
	}
	return o
}

// set records level lv at eff and reports whether the state changed.
func (m *Bucket) set(lv *big.Rat, eff int64) bool {
	old, oldT := m.level, m.t
	if lv.Cmp(m.rat(m.L.Burst)) >= 0 {
		m.level = nil
		return old != nil
	}
	m.level, m.t = lv, eff
	return old == nil || oldT != eff || old.Cmp(lv) != 0
}

// Apply runs op on the model and returns the expected outcome.
func (m *Bucket) Apply(op Op) ratelimit.Outcome {
	lv, eff, skew := m.at(op.Now)
	has := m.level != nil
	o := m.describe(lv, skew, has)
	c := op.Cost
	switch op.Kind {
	case ratelimit.OpTake, ratelimit.OpReserve:
		switch {
		case c > m.L.Burst:
			o.RetryAfter = ratelimit.Never
			return o
		case c == 0:
			o.RetryAfter = m.wait(lv, 1, skew)
			o.Allowed = o.RetryAfter == 0
			return o
		}
		w := m.wait(lv, c, skew)
		if op.Kind == ratelimit.OpReserve && m.Queue {
			w = m.wait(lv, m.L.Burst, skew)
		}
		if op.Kind == ratelimit.OpTake && w > 0 || op.Kind == ratelimit.OpReserve && w > op.MaxWait {
			o.RetryAfter = w
			return o
		}
		lv = new(big.Rat).Sub(lv, m.rat(c))
		if lv.Cmp(m.rat(-m.maxDebt())) < 0 {
			o.RetryAfter = w
			return o
		}
		m.set(lv, eff)
		o = m.describe(lv, skew, m.level != nil)
		o.Allowed, o.Changed = true, true
		if op.Kind == ratelimit.OpReserve {
			o.Delay = w
		}
		return o
	case ratelimit.OpRefund:
		o.Allowed = true
		if c == 0 || lv.Cmp(m.rat(m.L.Burst)) >= 0 {
			return o
		}
		lv = new(big.Rat).Add(lv, m.rat(c))
		if b := m.rat(m.L.Burst); lv.Cmp(b) > 0 {
			lv = b
		}
		m.set(lv, eff)
		o = m.describe(lv, skew, m.level != nil)
		o.Allowed, o.Changed = true, true
		return o
	case ratelimit.OpCharge:
		if c > 0 {
			lv = new(big.Rat).Sub(lv, m.rat(c))
			if d := m.rat(-m.maxDebt()); lv.Cmp(d) < 0 {
				lv = d
			}
			changed := m.set(lv, eff)
			o = m.describe(lv, skew, m.level != nil)
			o.Changed = changed
		}
		o.RetryAfter = m.wait(lv, 1, skew)
		o.Allowed = o.RetryAfter == 0
		return o
	}
	panic("model: unknown op")
}

// maxDebt is the documented floor of the level in debt:
// min(floor(MaxWindowSpan·Count/Period), 2^50).
func (m *Bucket) maxDebt() int64 {
	d := new(big.Int).Mul(big.NewInt(int64(ratelimit.MaxWindowSpan)), big.NewInt(m.L.Count))
	d.Quo(d, big.NewInt(int64(m.L.Period)))
	if d.Cmp(big.NewInt(1<<50)) > 0 {
		return 1 << 50
	}
	return d.Int64()
}
