// Package memhook lets the user package reach the embedded memory store's
// per-namespace fast path without exporting it from package memstore.
package memhook

import (
	"context"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// Space applies checks whose Namespace is the one it was opened for,
// without looking the namespace up or validating the rule again.
// It must be safe for concurrent use.
type Space interface {
	// Apply is Store.Apply for c. It checks only c's per-call fields
	// (Check.ValidateRequest): the caller has validated its algorithm,
	// limit and namespace. Check and Outcome pass by value: pointers
	// through an interface call would escape to the heap.
	Apply(ctx context.Context, c ratelimit.Check) (ratelimit.Outcome, error)
}

// Open returns the fast path of namespace ns in st when st is a memory
// store, and nil otherwise. Package memstore sets it when it is
// initialised; it is nil until then.
var Open func(st ratelimit.Store, ns string) Space
