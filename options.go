package sluice

import (
	"context"
	"fmt"
	"sync"

	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// Option configures a Limiter or a Composite. The With functions of this
// package create them.
type Option interface {
	apply(*config) error
}

type config struct {
	store   ratelimit.Store
	observe func(ctx context.Context, key string, d Decision, err error)
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

// WithStore makes the limiter keep its buckets in st instead of the
// process-wide memory store; for example a redisstore, a pgstore, a
// cluster node, or a memstore of its own. The limiter never closes st.
func WithStore(st ratelimit.Store) Option {
	return optionFunc(func(c *config) error {
		if st == nil {
			return fmt.Errorf("%w: nil store", ratelimit.ErrInvalidOption)
		}
		c.store = st
		return nil
	})
}

// WithObserver makes the limiter call fn after every decision, for metrics
// and audit logs: with the key, the decision and the store error, if any.
// A decision of the failure policy (ByPolicy) comes with the store error
// it masked. fn runs on the caller's goroutine, so it must be fast, must
// not block, and must be safe for concurrent use. A Composite calls it once
// per rule.
func WithObserver(fn func(ctx context.Context, key string, d Decision, err error)) Option {
	return optionFunc(func(c *config) error {
		if fn == nil {
			return fmt.Errorf("%w: nil observer", ratelimit.ErrInvalidOption)
		}
		c.observe = fn
		return nil
	})
}

// defaultStore is the process-wide memory store of limiters made without
// WithStore, so that they share buckets by rule name.
var defaultStore = sync.OnceValue(func() ratelimit.Store {
	st, err := memstore.New()
	if err != nil { // memstore.New fails only on a bad option
		panic(err)
	}
	return st
})

func buildConfig(opts []Option) (config, error) {
	var c config
	for _, o := range opts {
		if o == nil {
			return c, fmt.Errorf("%w: nil option", ratelimit.ErrInvalidOption)
		}
		if err := o.apply(&c); err != nil {
			return c, err
		}
	}
	if c.store == nil {
		c.store = defaultStore()
	}
	return c, nil
}
