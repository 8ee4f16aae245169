package ratelimit

import "errors"

// Sentinel errors. Every error returned by this package and by conforming
// stores wraps one of these; match them with [errors.Is].
var (
	// ErrInvalid reports input that can never be applied: every error
	// below named ErrInvalid… wraps it, so one errors.Is tells a caller's
	// mistake (HTTP 400) from a store failure.
	ErrInvalid = errors.New("ratelimit: invalid argument")
	// ErrInvalidLimit reports a Limit that is zero, negative or too large
	// to compute with exactly (see [Limit.Validate]).
	ErrInvalidLimit = invalid("ratelimit: invalid limit")
	// ErrInvalidKey reports an empty key or one longer than [MaxKeyLen].
	ErrInvalidKey = invalid("ratelimit: invalid key")
	// ErrInvalidCost reports a negative cost or one above [MaxCost].
	ErrInvalidCost = invalid("ratelimit: invalid cost")
	// ErrInvalidRule reports a rule or check without an algorithm, with a
	// bad name, or naming an unknown operation.
	ErrInvalidRule = invalid("ratelimit: invalid rule")
	// ErrInvalidOption reports an option value a constructor refused.
	ErrInvalidOption = invalid("ratelimit: invalid option")
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
	// ErrClosed reports use of a closed store.
	ErrClosed = errors.New("ratelimit: closed")
)

// invalidError is a sentinel that also matches ErrInvalid.
type invalidError struct{ msg string }

func invalid(msg string) error { return &invalidError{msg} }

func (e *invalidError) Error() string { return e.msg }

func (e *invalidError) Unwrap() error { return ErrInvalid }
