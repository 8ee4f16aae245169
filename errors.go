package sluice

import (
	"errors"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// Errors a Limiter or a Composite returns; match them with errors.Is. The
// contract package ratelimit has finer ones (ratelimit.ErrInvalidKey,
// ratelimit.ErrClosed, ratelimit.ErrUnsupported, …) for callers that need
// them.
var (
	// ErrInvalid reports input that can never succeed: a bad rule, limit,
	// key, cost or option. Nothing was consumed.
	ErrInvalid = ratelimit.ErrInvalid
	// ErrUnavailable reports that the store failed and certainly applied
	// nothing; a fail-closed rule returns it with its denial.
	ErrUnavailable = ratelimit.ErrUnavailable
	// ErrUnknownOutcome reports that the store may have applied the call:
	// its reply was lost, or the budget ran out after the request was sent.
	// A fail-closed rule returns it with its denial.
	ErrUnknownOutcome = ratelimit.ErrUnknownOutcome
	// ErrWaitTooLong reports that Wait would have to wait past the
	// context's deadline, or for a cost that can never be admitted.
	ErrWaitTooLong = errors.New("sluice: wait exceeds deadline")
)
