package models

import (
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/model"
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
func (TokenBucket) New(l ratelimit.Limit) Key { return key{&model.Bucket{L: l, Clamp: true}} }

// GCRA models package gcra: admission is the token bucket's, described by
// the virtual instant at which the bucket was empty; nothing clamps the
// instant, so an earlier instant may find the bucket in debt.
type GCRA struct{}

// Algorithm returns "gcra".
func (GCRA) Algorithm() string { return "gcra" }

// New returns a full bucket.
func (GCRA) New(l ratelimit.Limit) Key { return key{&model.Bucket{L: l}} }

// LeakyBucket models package leakybucket used as a meter: a bucket of
// capacity Burst that starts empty and drains continuously at Count per
// Period; a cost is admitted when it fits. An instant earlier than the
// last change is evaluated at that change.
type LeakyBucket struct{}

// Algorithm returns "leakybucket".
func (LeakyBucket) Algorithm() string { return "leakybucket" }

// New returns an empty bucket.
func (LeakyBucket) New(l ratelimit.Limit) Key {
	return key{&model.Bucket{L: l, Clamp: true, Queue: true}}
}

// FixedWindow models package fixedwindow: windows of W = Burst·Period/Count
// aligned to the Unix epoch, each admitting Burst units. An instant before
// the window of the last change is evaluated at that window's start.
type FixedWindow struct{}

// Algorithm returns "fixedwindow".
func (FixedWindow) Algorithm() string { return "fixedwindow" }

// New returns a key with nothing counted.
func (FixedWindow) New(l ratelimit.Limit) Key { return key{&model.FixedWindow{L: l}} }

// SlidingWindow models package slidingwindow: windows of
// W = Burst·Period/Count aligned to the Unix epoch; at an instant el into
// window w the estimate is count(w) + ceil(count(w−1)·(W−el)/W), and a
// cost n is admitted when estimate + n <= Burst. Waits are found by binary
// search, not by the algorithm's closed form.
type SlidingWindow struct{}

// Algorithm returns "slidingwindow".
func (SlidingWindow) Algorithm() string { return "slidingwindow" }

// New returns a key with nothing counted.
func (SlidingWindow) New(l ratelimit.Limit) Key { return key{&model.SlidingWindow{L: l}} }

// SlidingLog models package slidinglog: units admitted at ts count at t
// while t − ts < W = Burst·Period/Count, and a cost n is admitted when the
// counting units plus n are at most Burst.
type SlidingLog struct{}

// Algorithm returns "slidinglog".
func (SlidingLog) Algorithm() string { return "slidinglog" }

// New returns a key with an empty log.
func (SlidingLog) New(l ratelimit.Limit) Key { return key{&model.SlidingLog{L: l}} }

// key adapts one of the shared models (package internal/model, which the
// algorithms' own tests use too) to Key.
type key struct {
	m interface {
		Apply(op model.Op) ratelimit.Outcome
	}
}

// Decide implements Key.
func (k key) Decide(now, cost int64) Result {
	return Of(k.m.Apply(model.Op{Now: now, Kind: ratelimit.OpTake, Cost: cost}))
}
