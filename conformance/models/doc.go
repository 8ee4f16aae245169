// Package models holds reference models of the in-repo algorithms: slow,
// obviously correct descriptions of what each algorithm decides, written
// independently of the algorithms' code. The bucket models keep their
// level as an exact rational (math/big); the window models keep plain
// per-window counts over windows of Burst·Period/Count and find waits by
// searching rather than by the algorithms' closed forms. They present the
// one set of models the algorithms' own tests use (the root module's
// internal/model), so the two can never disagree.
//
// algotest compares an algorithm's decisions with its model
// (algotest.WithModel), and the differential fuzz target compares a model
// with the memory store. A model describes Decide only: takes and peeks.
//
// Models are not safe for concurrent use; each Key is one key's history.
package models

import (
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// Model is the reference description of one algorithm.
type Model interface {
	// Algorithm returns the Name of the algorithm the model describes.
	Algorithm() string
	// New returns the model of a key without state under limit l, which
	// must be valid.
	New(l ratelimit.Limit) Key
}

// Key is the modelled state of one key.
type Key interface {
	// Decide takes cost units at now (Unix nanoseconds), as
	// ratelimit.Algorithm.Decide would, and updates the key when allowed.
	// Cost 0 peeks. Cost must be in 0..ratelimit.MaxCost.
	Decide(now, cost int64) Result
}

// Result is the part of a ratelimit.Outcome a model predicts.
type Result struct {
	Allowed    bool
	Remaining  int64
	RetryAfter time.Duration
	ResetAfter time.Duration
}

// Of returns the Result part of o.
func Of(o ratelimit.Outcome) Result {
	return Result{Allowed: o.Allowed, Remaining: o.Remaining, RetryAfter: o.RetryAfter, ResetAfter: o.ResetAfter}
}

// All returns the models of every in-repo algorithm, in a new slice.
func All() []Model {
	return []Model{TokenBucket{}, GCRA{}, LeakyBucket{}, FixedWindow{}, SlidingWindow{}, SlidingLog{}}
}

// For returns the model of the algorithm named name, and whether there is
// one.
func For(name string) (Model, bool) {
	for _, m := range All() {
		if m.Algorithm() == name {
			return m, true
		}
	}
	return nil, false
}
