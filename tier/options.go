package tier

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// Mode is how a Store decides the checks of one rule.
type Mode uint8

const (
	// Exact passes every check through to the backing store: the Store
	// then decides exactly as the backing store does.
	Exact Mode = iota
	// Lease takes units from the backing store in leases and spends them
	// in process, refunding what is left when a lease expires and on
	// Close. Over any interval the admitted count is at most what the
	// backing store would admit plus the leases outstanding at its start.
	Lease
	// Sync decides from a local copy of each bucket, charges the units it
	// admitted to the backing store every SyncInterval (into debt when
	// needed) and pulls the global level back.
	Sync
)

// String returns the mode's name.
func (m Mode) String() string {
	switch m {
	case Exact:
		return "exact"
	case Lease:
		return "lease"
	case Sync:
		return "sync"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Rule is how a Store decides the checks of one namespace (a Limiter's
// rule name). The zero value is Exact.
type Rule struct {
	// Mode selects Exact, Lease or Sync.
	Mode Mode
	// Nodes estimates how many processes share the backing store for the
	// rule. A lease is at most 1/Nodes of the level the backing store last
	// reported and of the units the rate replenishes in LeaseTTL; a sync
	// view spends at most 1/Nodes of the level between syncs. 0 means 4.
	Nodes int
	// LeaseTTL is how long a lease may be spent before its unused units
	// are refunded (Lease). 0 means 2 seconds.
	LeaseTTL time.Duration
	// MaxLease caps the units of one lease (Lease). 0 means no cap other
	// than the sizing rule of docs/tier.md.
	MaxLease int64
	// SyncInterval is how often a Sync view charges what it admitted and
	// pulls the global level back. 0 means 100 ms.
	SyncInterval time.Duration
	// Shards spreads every key of the rule over this many sub-keys of the
	// backing store, each holding 1/Shards of the limit, with borrowing
	// between them (hot-key sharding; Exact and Lease). 0 and 1 mean no
	// sharding; at most 64.
	Shards int
}

const (
	defaultNodes        = 4
	defaultLeaseTTL     = 2 * time.Second
	defaultSyncInterval = 100 * time.Millisecond
	maxShards           = 64
)

// withDefaults returns r with zero fields set to their defaults.
func (r Rule) withDefaults() Rule {
	if r.Nodes == 0 {
		r.Nodes = defaultNodes
	}
	if r.LeaseTTL == 0 {
		r.LeaseTTL = defaultLeaseTTL
	}
	if r.SyncInterval == 0 {
		r.SyncInterval = defaultSyncInterval
	}
	if r.Shards == 0 {
		r.Shards = 1
	}
	return r
}

func (r Rule) validate(name string) error {
	switch {
	case r.Mode > Sync:
		return fmt.Errorf("%w: rule %q: unknown mode %d", ratelimit.ErrInvalidOption, name, r.Mode)
	case r.Nodes < 0:
		return fmt.Errorf("%w: rule %q: negative node count %d", ratelimit.ErrInvalidOption, name, r.Nodes)
	case r.LeaseTTL < 0:
		return fmt.Errorf("%w: rule %q: negative lease TTL %s", ratelimit.ErrInvalidOption, name, r.LeaseTTL)
	case r.MaxLease < 0:
		return fmt.Errorf("%w: rule %q: negative max lease %d", ratelimit.ErrInvalidOption, name, r.MaxLease)
	case r.SyncInterval < 0:
		return fmt.Errorf("%w: rule %q: negative sync interval %s", ratelimit.ErrInvalidOption, name, r.SyncInterval)
	case r.Shards < 0 || r.Shards > maxShards:
		return fmt.Errorf("%w: rule %q: shards %d outside 0..%d", ratelimit.ErrInvalidOption, name, r.Shards, maxShards)
	case r.Shards > 1 && r.Mode == Sync:
		return fmt.Errorf("%w: rule %q: sharding applies to Exact and Lease modes, not Sync", ratelimit.ErrInvalidOption, name)
	}
	return nil
}

// Option configures a Store.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	rules         map[string]*Rule
	defaultRule   *Rule
	clock         ratelimit.Clock
	observe       func(Event)
	probeInterval time.Duration
}

// WithRule sets how the Store decides the checks of namespace (a
// Limiter's rule name). Namespaces without a rule use the default rule
// (WithDefaultRule), Exact unless set.
func WithRule(namespace string, r Rule) Option {
	return optionFunc(func(c *config) error {
		if err := r.validate(namespace); err != nil {
			return err
		}
		r = r.withDefaults()
		c.rules[namespace] = &r
		return nil
	})
}

// WithDefaultRule sets the rule of namespaces WithRule does not name.
func WithDefaultRule(r Rule) Option {
	return optionFunc(func(c *config) error {
		if err := r.validate("(default)"); err != nil {
			return err
		}
		r = r.withDefaults()
		c.defaultRule = &r
		return nil
	})
}

// WithClock sets the clock that times leases, syncs and cached denials
// (ratelimit.SystemClock by default). Decisions of the backing store keep
// the backing store's clock.
func WithClock(clock ratelimit.Clock) Option {
	return optionFunc(func(c *config) error {
		if clock == nil {
			return fmt.Errorf("%w: nil clock", ratelimit.ErrInvalidOption)
		}
		c.clock = clock
		return nil
	})
}

// WithObserver makes the Store call fn for every Event: each decision
// (local, by the backing store, or degraded), lease refresh, refund,
// sync, and store failure and recovery. fn runs on the caller's
// goroutine, must be safe for concurrent use and must not block.
func WithObserver(fn func(Event)) Option {
	return optionFunc(func(c *config) error {
		c.observe = fn
		return nil
	})
}

// WithProbeInterval sets how long the Store stays degraded after the
// backing store failed or ran out of budget before one call tries it
// again (100 ms by default). Meanwhile checks are decided from the
// leases and local views alone, and fail with ratelimit.ErrUnavailable
// once those are spent.
func WithProbeInterval(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: probe interval %s is not positive", ratelimit.ErrInvalidOption, d)
		}
		c.probeInterval = d
		return nil
	})
}
