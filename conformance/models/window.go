package models

import (
	"math/big"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// windowOf returns the index of the window of Period p holding instant t:
// floor(t/p).
func windowOf(t int64, p int64) int64 {
	w := t / p
	if t%p != 0 && t < 0 {
		w--
	}
	return w
}

// startOf returns the start of window w, in nanoseconds, as a big.Int
// (the end of the last window overflows int64).
func startOf(w int64, p int64) *big.Int {
	return new(big.Int).Mul(big.NewInt(w), big.NewInt(p))
}

// since returns end − now, both as nanoseconds.
func since(end *big.Int, now int64) *big.Int { return new(big.Int).Sub(end, big.NewInt(now)) }

// FixedWindow models package fixedwindow: windows of Period aligned to the
// Unix epoch, each admitting Burst units. An instant before the window of
// the last change is evaluated at that window's start, and waits are then
// measured from the earlier instant.
type FixedWindow struct{}

// Algorithm returns "fixedwindow".
func (FixedWindow) Algorithm() string { return "fixedwindow" }

// New returns a key with nothing counted.
func (FixedWindow) New(l ratelimit.Limit) Key { return &fixedKey{l: l, counts: map[int64]int64{}} }

type fixedKey struct {
	l       ratelimit.Limit
	counts  map[int64]int64 // units admitted per window index
	changed bool
	lastWin int64 // window of the last change
}

// Decide implements Key.
func (k *fixedKey) Decide(now, cost int64) Result {
	now = clampNow(now)
	p := int64(k.l.Period)
	w := windowOf(now, p)
	if k.changed && w < k.lastWin {
		w = k.lastWin
	}
	used := k.counts[w]
	need := max(cost, 1)
	res := Result{Remaining: max(k.l.Burst-used, 0)}
	next := since(startOf(w+1, p), now)
	switch {
	case cost > k.l.Burst:
		res.RetryAfter = ratelimit.Never
	case used+need > k.l.Burst:
		res.RetryAfter = wait(next)
	default:
		res.Allowed = true
		if cost > 0 {
			used += cost
			k.counts[w] = used
			k.changed, k.lastWin = true, w
			res.Remaining = k.l.Burst - used
		}
	}
	if used > 0 {
		res.ResetAfter = wait(next)
	}
	return res
}

// SlidingWindow models package slidingwindow: windows of Period aligned to
// the Unix epoch; at an instant el into window w the estimate is
// count(w) + ceil(count(w−1)·(Period−el)/Period), and a cost n is admitted
// when estimate + n <= Burst. Waits are found by binary search over the
// instants at which the (non-increasing) estimate allows the cost, not by
// a closed form. An instant before the window of the last change is
// evaluated at that window's start.
type SlidingWindow struct{}

// Algorithm returns "slidingwindow".
func (SlidingWindow) Algorithm() string { return "slidingwindow" }

// New returns a key with nothing counted.
func (SlidingWindow) New(l ratelimit.Limit) Key { return &slidingKey{l: l, counts: map[int64]int64{}} }

type slidingKey struct {
	l       ratelimit.Limit
	counts  map[int64]int64
	changed bool
	lastWin int64
}

// estimate returns the weighted count at instant t (as a big.Int offset
// from the caller so that instants past int64 work).
func (k *slidingKey) estimate(t *big.Int) *big.Int {
	p := big.NewInt(int64(k.l.Period))
	w, el := new(big.Int).DivMod(t, p, new(big.Int)) // floor division, el in [0, p)
	cur, prev := new(big.Int), new(big.Int)
	if w.IsInt64() { // nothing is ever counted past the last int64 instant
		cur.SetInt64(k.counts[w.Int64()])
		prev.SetInt64(k.counts[w.Int64()-1])
	}
	weighted := new(big.Rat).SetFrac(new(big.Int).Mul(prev, new(big.Int).Sub(p, el)), p)
	return new(big.Int).Add(cur, ceil(weighted))
}

// Decide implements Key.
func (k *slidingKey) Decide(now, cost int64) Result {
	now = clampNow(now)
	p := int64(k.l.Period)
	t := now
	if k.changed && windowOf(t, p) < k.lastWin {
		t = k.lastWin * p
	}
	bt := big.NewInt(t)
	est := k.estimate(bt)
	burst := big.NewInt(k.l.Burst)
	need := max(cost, 1)
	fits := func(at *big.Int, n int64) bool {
		return new(big.Int).Add(k.estimate(at), big.NewInt(n)).Cmp(burst) <= 0
	}
	res := Result{Remaining: count(new(big.Int).Sub(burst, est))}
	switch {
	case cost > k.l.Burst:
		res.RetryAfter = ratelimit.Never
	case !fits(bt, need):
		// The estimate is zero two windows on, so the answer lies in
		// (t, t+2·Period]; search for the first instant that fits.
		lo, hi := new(big.Int).Set(bt), new(big.Int).Add(bt, big.NewInt(2*p))
		for new(big.Int).Sub(hi, lo).Cmp(big.NewInt(1)) > 0 {
			mid := new(big.Int).Rsh(new(big.Int).Add(lo, hi), 1)
			if fits(mid, need) {
				hi = mid
			} else {
				lo = mid
			}
		}
		res.RetryAfter = wait(since(hi, now))
	default:
		res.Allowed = true
		if cost > 0 {
			w := windowOf(t, p)
			k.counts[w] += cost
			k.changed, k.lastWin = true, w
			res.Remaining = count(new(big.Int).Sub(burst, k.estimate(bt)))
		}
	}
	w := windowOf(t, p)
	switch {
	case k.counts[w] > 0:
		res.ResetAfter = wait(since(startOf(w+2, p), now))
	case k.counts[w-1] > 0:
		res.ResetAfter = wait(since(startOf(w+1, p), now))
	}
	return res
}
