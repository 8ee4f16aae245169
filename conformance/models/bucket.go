package models

import (
	"math/big"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// TokenBucket models package tokenbucket: a bucket of at most Burst tokens
// that starts full and refills continuously at Count per Period; a cost is
// admitted when the bucket holds at least that many tokens. An instant
// earlier than the last change is evaluated at that change, and waits are
// then measured from the earlier instant.
type TokenBucket struct{}

// Algorithm returns "tokenbucket".
func (TokenBucket) Algorithm() string { return "tokenbucket" }

// New returns a full bucket.
func (TokenBucket) New(l ratelimit.Limit) Key { return &tokenKey{l: l} }

type tokenKey struct {
	l      ratelimit.Limit
	tokens *big.Rat // nil: full, never changed
	last   int64    // instant of the last change
}

// at returns the tokens at instant t >= last.
func (k *tokenKey) at(t int64) *big.Rat {
	b := ri(k.l.Burst)
	if k.tokens == nil {
		return b
	}
	return minRat(b, add(k.tokens, mul(ri(t-k.last), rate(k.l))))
}

// Decide implements Key.
func (k *tokenKey) Decide(now, cost int64) Result {
	now = clampNow(now)
	t := now
	if k.tokens != nil && t < k.last {
		t = k.last
	}
	lag := big.NewInt(t - now) // waits count from the caller's instant
	tokens := k.at(t)
	need := max(cost, 1)
	res := Result{Remaining: count(floor(tokens))}
	untilFull := func(level *big.Rat) *big.Int {
		return new(big.Int).Add(lag, ceil(timeFor(sub(ri(k.l.Burst), level), k.l)))
	}
	switch {
	case cost > k.l.Burst:
		res.RetryAfter = ratelimit.Never
	case tokens.Cmp(ri(need)) < 0:
		res.RetryAfter = wait(new(big.Int).Add(lag, ceil(timeFor(sub(ri(need), tokens), k.l))))
	default:
		res.Allowed = true
		if cost > 0 {
			tokens = sub(tokens, ri(cost))
			k.tokens, k.last = tokens, t
			res.Remaining = count(floor(tokens))
		}
	}
	res.ResetAfter = wait(untilFull(tokens))
	return res
}

// GCRA models package gcra: admission is the token bucket's, described by
// the virtual instant S at which the bucket was empty. At now the bucket
// holds min(Burst, (now−S)·Count/Period) tokens, which may be negative when
// the clock has gone back before S; nothing clamps the instant.
type GCRA struct{}

// Algorithm returns "gcra".
func (GCRA) Algorithm() string { return "gcra" }

// New returns a full bucket.
func (GCRA) New(l ratelimit.Limit) Key { return &gcraKey{l: l} }

type gcraKey struct {
	l     ratelimit.Limit
	empty *big.Rat // S in nanoseconds; nil: full, never changed
}

// Decide implements Key.
func (k *gcraKey) Decide(now, cost int64) Result {
	now = clampNow(now)
	b := ri(k.l.Burst)
	tokens := b
	if k.empty != nil {
		tokens = minRat(b, mul(sub(ri(now), k.empty), rate(k.l)))
	}
	need := max(cost, 1)
	res := Result{Remaining: count(floor(tokens))}
	switch {
	case cost > k.l.Burst:
		res.RetryAfter = ratelimit.Never
	case tokens.Cmp(ri(need)) < 0:
		res.RetryAfter = wait(ceil(timeFor(sub(ri(need), tokens), k.l)))
	default:
		res.Allowed = true
		if cost > 0 {
			tokens = sub(tokens, ri(cost))
			k.empty = sub(ri(now), timeFor(tokens, k.l))
			res.Remaining = count(floor(tokens))
		}
	}
	res.ResetAfter = wait(ceil(timeFor(sub(b, tokens), k.l)))
	return res
}

// LeakyBucket models package leakybucket used as a meter: a bucket of
// capacity Burst that starts empty and drains continuously at Count per
// Period; a cost is admitted when it fits. An instant earlier than the
// last change is evaluated at that change, and waits are then measured
// from the earlier instant.
type LeakyBucket struct{}

// Algorithm returns "leakybucket".
func (LeakyBucket) Algorithm() string { return "leakybucket" }

// New returns an empty bucket.
func (LeakyBucket) New(l ratelimit.Limit) Key { return &leakyKey{l: l, water: new(big.Rat)} }

type leakyKey struct {
	l     ratelimit.Limit
	water *big.Rat // level at last
	last  int64
	used  bool // changed at least once
}

// Decide implements Key.
func (k *leakyKey) Decide(now, cost int64) Result {
	now = clampNow(now)
	t := now
	if k.used && t < k.last {
		t = k.last
	}
	lag := big.NewInt(t - now)
	water := k.water
	if k.used {
		water = maxRat(new(big.Rat), sub(k.water, mul(ri(t-k.last), rate(k.l))))
	}
	b := ri(k.l.Burst)
	need := max(cost, 1)
	res := Result{Remaining: count(floor(sub(b, water)))}
	switch {
	case cost > k.l.Burst:
		res.RetryAfter = ratelimit.Never
	case add(water, ri(need)).Cmp(b) > 0:
		res.RetryAfter = wait(new(big.Int).Add(lag, ceil(timeFor(sub(add(water, ri(need)), b), k.l))))
	default:
		res.Allowed = true
		if cost > 0 {
			water = add(water, ri(cost))
			k.water, k.last, k.used = water, t, true
			res.Remaining = count(floor(sub(b, water)))
		}
	}
	res.ResetAfter = wait(new(big.Int).Add(lag, ceil(timeFor(water, k.l))))
	if water.Sign() == 0 {
		res.ResetAfter = 0
	}
	return res
}
