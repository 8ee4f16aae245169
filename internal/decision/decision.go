// Package decision lets the memory store write a caller's sluice.Decision
// in place, under the store's lock: Fields has Decision's fields, in its
// order and of its types, so that a *sluice.Decision converts to a
// *Fields, and the conversion stops compiling when the two differ.
package decision

import (
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// Fields mirrors sluice.Decision; see its documentation.
type Fields struct {
	Allowed    bool
	Remaining  int64
	RetryAfter time.Duration
	ResetAfter time.Duration
	Limit      ratelimit.Limit
	Rule       string
	ByPolicy   bool
}
