package sluice

import (
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// Limit is Count units per Period with at most Burst admitted at once, in
// integers so that every store computes bit-identical results. For every
// algorithm the long-run rate is Count/Period and Burst is the most
// admitted at once; see the package documentation for what each
// algorithm does with the three fields. It is the contract's
// ratelimit.Limit: build one with PerSecond, PerMinute or PerHour and
// adjust the burst with WithBurst, or write the fields out.
type Limit = ratelimit.Limit

// PerSecond returns a Limit of n units per second with a burst of n.
func PerSecond(n int64) Limit { return ratelimit.Every(time.Second, n) }

// PerMinute returns a Limit of n units per minute with a burst of n.
func PerMinute(n int64) Limit { return ratelimit.Every(time.Minute, n) }

// PerHour returns a Limit of n units per hour with a burst of n.
func PerHour(n int64) Limit { return ratelimit.Every(time.Hour, n) }

// Unlimited returns the Limit that admits everything: a rule with it is
// answered without touching the store, with Remaining the largest int64.
func Unlimited() Limit { return ratelimit.Unlimited() }

// Never is the RetryAfter of a decision whose cost exceeds the burst: it
// can never pass, however long the caller waits.
const Never = ratelimit.Never
