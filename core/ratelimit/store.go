package ratelimit

import (
	"context"
	"fmt"
	"time"
)

// Check is one request to a Store: apply Op with Cost to the state of Key
// in Namespace under Algorithm and Limit.
//
// Namespace and Key together identify the state. Both are opaque bytes:
// stores never interpret them as syntax (no templating into scripts or
// SQL). A Limiter sets Namespace to its rule's name, so two rules never
// share state.
type Check struct {
	Namespace string
	Key       string
	Algorithm Algorithm
	Limit     Limit
	// Cost is the number of units; 0 with OpTake peeks.
	Cost int64
	// Op is what to do; the zero value is OpTake.
	Op Op
	// MaxWait bounds the delay of OpReserve.
	MaxWait time.Duration
}

// Validate reports whether c can be applied: a non-nil algorithm, a valid
// limit, a key of 1..MaxKeyLen bytes, a namespace of at most MaxKeyLen
// bytes, a cost in 0..MaxCost, a known op and a non-negative MaxWait.
// Errors wrap ErrInvalidRule, ErrInvalidLimit, ErrInvalidKey or
// ErrInvalidCost.
func (c *Check) Validate() error {
	if c.Algorithm == nil {
		return fmt.Errorf("%w: nil algorithm", ErrInvalidRule)
	}
	// A limit with Count and Period in range and 1 <= Burst <= Count is
	// valid without Limit.Validate's 128-bit check: refilling it takes at
	// most MaxPeriod, under MaxWindowSpan. Any other limit gets the full
	// check and its error.
	if l := c.Limit; l.Count < 1 || l.Count > MaxCount || l.Period < 1 || l.Period > MaxPeriod || l.Burst < 1 || l.Burst > l.Count {
		if err := l.Validate(); err != nil {
			return err
		}
	}
	if v, ok := c.Algorithm.(LimitValidator); ok {
		if err := v.ValidateLimit(c.Limit); err != nil {
			return err
		}
	}
	if len(c.Namespace) <= MaxKeyLen || !ValidKey(c.Key) {
		return c.ValidateRequest() // a bad key is reported before the namespace
	}
	return fmt.Errorf("%w: namespace length %d over %d", ErrInvalidKey, len(c.Namespace), MaxKeyLen)
}

// Store applies algorithms to keyed state atomically, using its own clock.
//
// Implementations must be safe for concurrent use by many goroutines and,
// for shared stores, by many processes. Every method that may touch the
// backend takes a context and honours its deadline and cancellation.
//
// Errors wrap the sentinels of this package: invalid input (nothing
// changed), ErrUnavailable (certainly not applied), ErrUnknownOutcome (may
// have been applied), ErrClosed, ErrCorruptState, ErrUnsupported. Denial is not an error.
//
// Third-party stores prove conformance with
// github.com/sluicehq/sluice/conformance/storetest.
type Store interface {
	// Apply applies one check atomically and returns its outcome.
	Apply(ctx context.Context, c Check) (Outcome, error)

	// ApplyAll applies several checks as one atomic step, all or nothing:
	// if any OpTake or OpReserve check is denied, no check changes any
	// state. It writes one outcome per check into out, which must have
	// len(out) >= len(checks) (otherwise the error wraps
	// ErrInvalidOption and nothing is applied), and reports whether all
	// were allowed.
	// Checks naming the same namespace and key are applied in order, each
	// seeing the previous one's effect.
	ApplyAll(ctx context.Context, checks []Check, out []Outcome) (allowed bool, err error)

	// Reset deletes the state of key in namespace, making it fully
	// available again. Resetting a key without state is not an error.
	Reset(ctx context.Context, namespace, key string) error

	// Close releases the store's resources. Closing twice is not an error;
	// every other call after Close returns ErrClosed.
	Close() error
}

// Budgeter is an optional Store capability: the store budget a Limiter
// applies to rules that set none, that is, how long one call may wait for
// the store before the rule's failure policy answers instead. A store
// that decides in process without waiting on I/O (the memory store, a
// gossip node) returns 0, and the Limiter then sets no deadline at all.
// Stores without the capability get the Limiter's default for remote
// stores.
type Budgeter interface {
	DefaultBudget() time.Duration
}

// DeadlineApplier is an optional Store capability: Apply and ApplyAll
// bounded by a deadline given as a value, which the store enforces itself
// instead of through a context of the caller's. A Limiter uses it for a
// rule's budget, sparing a context and a timer per call; a store that
// queues calls can watch all their deadlines with one timer. By the
// deadline, or when ctx ends, the call returns: with an error wrapping
// ErrUnavailable when nothing was sent, ErrUnknownOutcome when it may have
// been applied. A zero deadline means none.
type DeadlineApplier interface {
	ApplyBefore(ctx context.Context, deadline time.Time, c Check) (Outcome, error)
	ApplyAllBefore(ctx context.Context, deadline time.Time, checks []Check, out []Outcome) (allowed bool, err error)
}

// ValidKey reports whether key has an acceptable length (1..MaxKeyLen
// bytes). Content is never restricted: any byte is data. Stores share it.
func ValidKey(key string) bool { return len(key) > 0 && len(key) <= MaxKeyLen }

// ValidateRequest checks only the per-call fields of c, the last checks of
// Validate: a key of 1..MaxKeyLen bytes, a cost in 0..MaxCost, a known op
// and a non-negative MaxWait. It is for callers that validated the
// algorithm, limit and namespace once for many checks, as a Limiter does
// with its rule.
func (c *Check) ValidateRequest() error {
	switch {
	case !ValidKey(c.Key):
		return fmt.Errorf("%w: key length %d outside 1..%d", ErrInvalidKey, len(c.Key), MaxKeyLen)
	case c.Cost < 0 || c.Cost > MaxCost:
		return fmt.Errorf("%w: cost %d outside 0..%d", ErrInvalidCost, c.Cost, int64(MaxCost))
	case c.Op > OpCharge:
		return fmt.Errorf("%w: unknown op %d", ErrInvalidRule, c.Op)
	case c.MaxWait < 0:
		return fmt.Errorf("%w: negative max wait %s", ErrInvalidCost, c.MaxWait)
	}
	return nil
}
