package ratelimit

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"
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
	if len(c.Namespace) <= MaxKeyLen || !ValidKey(c.Key) {
		return checkRequest(c) // a bad key is reported before the namespace
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
// have been applied), ErrClosed, ErrCorruptState, ErrUnsupported,
// ErrCrossSlot. Denial is not an error.
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

// ValidKey reports whether key has an acceptable length (1..MaxKeyLen
// bytes). Content is never restricted: any byte is data. Stores share it.
func ValidKey(key string) bool { return len(key) > 0 && len(key) <= MaxKeyLen }

// printableKey renders a key for error messages without dumping arbitrary
// bytes.
func printableKey(key string) string {
	const max = 64
	if len(key) > max {
		key = key[:max]
	}
	if utf8.ValidString(key) {
		return fmt.Sprintf("%q", key)
	}
	return fmt.Sprintf("%x", key)
}
