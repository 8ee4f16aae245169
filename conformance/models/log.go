package models

import (
	"math/big"
	"slices"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// SlidingLog models package slidinglog by brute force: it remembers every
// admitted call forever; units admitted at ts count at t while
// t − ts < Period, and a cost n is admitted when the counting units plus n
// are at most Burst. A wait is found by trying every instant at which a
// remembered call stops counting. An instant earlier than the newest
// admitted call is evaluated at that call's instant.
type SlidingLog struct{}

// Algorithm returns "slidinglog".
func (SlidingLog) Algorithm() string { return "slidinglog" }

// New returns a key with an empty log.
func (SlidingLog) New(l ratelimit.Limit) Key { return &logKey{l: l} }

type logEntry struct {
	at, units int64
}

type logKey struct {
	l   ratelimit.Limit
	log []logEntry // every admitted call, oldest first
}

// counting returns the units counting at instant t (a big.Int so that
// instants past int64 work).
func (k *logKey) counting(t *big.Int) int64 {
	p := big.NewInt(int64(k.l.Period))
	var n int64
	for _, e := range k.log {
		age := new(big.Int).Sub(t, big.NewInt(e.at))
		if age.Sign() >= 0 && age.Cmp(p) < 0 {
			n += e.units
		}
	}
	return n
}

// Decide implements Key.
func (k *logKey) Decide(now, cost int64) Result {
	now = clampNow(now)
	t := now
	if len(k.log) > 0 && t < k.log[len(k.log)-1].at {
		t = k.log[len(k.log)-1].at
	}
	bt := big.NewInt(t)
	used := k.counting(bt)
	need := max(cost, 1)
	res := Result{Remaining: max(k.l.Burst-used, 0)}
	switch {
	case cost > k.l.Burst:
		res.RetryAfter = ratelimit.Never
	case used+need > k.l.Burst:
		var expiries []*big.Int
		for _, e := range k.log {
			expiries = append(expiries, new(big.Int).Add(big.NewInt(e.at), big.NewInt(int64(k.l.Period))))
		}
		slices.SortFunc(expiries, func(a, b *big.Int) int { return a.Cmp(b) })
		for _, x := range expiries {
			if x.Cmp(bt) > 0 && k.counting(x)+need <= k.l.Burst {
				res.RetryAfter = wait(since(x, now))
				break
			}
		}
	default:
		res.Allowed = true
		if cost > 0 {
			k.log = append(k.log, logEntry{at: t, units: cost})
			used += cost
			res.Remaining = k.l.Burst - used
		}
	}
	if used > 0 {
		newest := k.log[len(k.log)-1].at
		res.ResetAfter = wait(since(new(big.Int).Add(big.NewInt(newest), big.NewInt(int64(k.l.Period))), now))
	}
	return res
}
