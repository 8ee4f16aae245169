package ratelimit

import "errors"

// Sentinel errors. Every error returned by this package and by conforming
// stores wraps one of these; match them with [errors.Is].
var (
	// ErrInvalidLimit reports a Limit that is zero, negative or too large
	// to compute with exactly (see [Limit.Validate]).
	ErrInvalidLimit = errors.New("ratelimit: invalid limit")
	// ErrInvalidKey reports an empty key or one longer than [MaxKeyLen].
	ErrInvalidKey = errors.New("ratelimit: invalid key")
	// ErrInvalidCost reports a negative cost or one above [MaxCost].
	ErrInvalidCost = errors.New("ratelimit: invalid cost")
	// ErrInvalidRule reports a Rule without an algorithm, with a bad name
	// or a bad limit.
	ErrInvalidRule = errors.New("ratelimit: invalid rule")
	// ErrInvalidOption reports an option value a constructor refused.
	ErrInvalidOption = errors.New("ratelimit: invalid option")
	// ErrCorruptState reports stored state an algorithm cannot decode: it
	// was written by another algorithm or damaged. The store leaves it
	// untouched; Reset clears it.
	ErrCorruptState = errors.New("ratelimit: corrupt state")
	// ErrUnsupported reports an operation the algorithm or the store does
	// not implement (for example Reserve on a fixed window).
	ErrUnsupported = errors.New("ratelimit: unsupported operation")
	// ErrUnavailable reports that the store could not be reached and the
	// operation certainly did not happen.
	ErrUnavailable = errors.New("ratelimit: store unavailable")
	// ErrUnknownOutcome reports that the operation may or may not have been
	// applied: the request was sent but no reply arrived (lost reply,
	// timeout after sending). Retrying may spend twice.
	ErrUnknownOutcome = errors.New("ratelimit: unknown outcome")
	// ErrClosed reports use of a closed store or limiter.
	ErrClosed = errors.New("ratelimit: closed")
	// ErrCrossSlot reports a composite whose keys cannot be applied in one
	// atomic step by the store (for example Redis Cluster keys in
	// different slots).
	ErrCrossSlot = errors.New("ratelimit: keys cannot be applied atomically together")
	// ErrWaitTooLong reports that Wait would have to wait past the
	// context deadline, or that the cost can never be admitted.
	ErrWaitTooLong = errors.New("ratelimit: wait exceeds deadline")
)
