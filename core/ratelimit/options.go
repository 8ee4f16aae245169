package ratelimit

import "fmt"

// Option configures a Limiter or a Composite. Options are created by the
// With* functions of this package; the interface is sealed.
type Option interface {
	apply(*config) error
}

type config struct {
	store    Store
	clock    Clock
	observer Observer
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

// WithStore makes the limiter use s instead of a new embedded MemoryStore.
// The limiter does not close s: its owner does.
func WithStore(s Store) Option {
	return optionFunc(func(c *config) error {
		if s == nil {
			return fmt.Errorf("%w: nil store", ErrInvalidOption)
		}
		c.store = s
		return nil
	})
}

// WithClock sets the clock of the embedded MemoryStore the limiter creates
// when no store is given (for tests). It is an error together with
// WithStore: a store keeps its own time.
func WithClock(clk Clock) Option {
	return optionFunc(func(c *config) error {
		if clk == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalidOption)
		}
		c.clock = clk
		return nil
	})
}

// WithObserver registers o to receive every decision.
func WithObserver(o Observer) Option {
	return optionFunc(func(c *config) error {
		if o == nil {
			return fmt.Errorf("%w: nil observer", ErrInvalidOption)
		}
		c.observer = o
		return nil
	})
}

func buildConfig(opts []Option) (config, bool, error) {
	var c config
	for _, o := range opts {
		if o == nil {
			return c, false, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		if err := o.apply(&c); err != nil {
			return c, false, err
		}
	}
	if c.store != nil && c.clock != nil {
		return c, false, fmt.Errorf("%w: WithClock applies only to the embedded store, not with WithStore", ErrInvalidOption)
	}
	owned := false
	if c.store == nil {
		var mopts []MemoryOption
		if c.clock != nil {
			mopts = append(mopts, WithMemoryClock(c.clock))
		}
		s, err := NewMemoryStore(mopts...)
		if err != nil {
			return c, false, err
		}
		c.store = s
		owned = true
	}
	return c, owned, nil
}
