package tier

// EventKind says what an Event reports.
type EventKind uint8

const (
	// LocalDecision reports a check decided in process, from a lease, a sync view
	// or a cached denial, without calling the backing store.
	LocalDecision EventKind = iota
	// StoreDecision reports a check decided by the backing store (Exact mode, or a
	// Lease or Sync rule near exhaustion or meeting a key).
	StoreDecision
	// DegradedDecision reports a check decided from leases or views while the
	// backing store is failing (Err is ratelimit.ErrUnavailable when they
	// were spent and the rule's failure policy must answer).
	DegradedDecision
	// LeaseRefresh reports a lease of Units units taken from the backing
	// store.
	LeaseRefresh
	// Refund reports Units unused units given back to the backing store
	// (Err set when the refund failed and the units were dropped).
	Refund
	// SyncPush reports Units units admitted locally and charged to the
	// backing store, and the view pulled back (Err set when it failed).
	SyncPush
	// StoreError reports a call to the backing store that failed with Err;
	// Shard names the sub-key of a sharded key (0 otherwise).
	StoreError
	// StoreRecovered reports that the backing store answered again after
	// failing.
	StoreRecovered
)

// String returns the kind's name.
func (k EventKind) String() string {
	switch k {
	case LocalDecision:
		return "local"
	case StoreDecision:
		return "store"
	case DegradedDecision:
		return "degraded"
	case LeaseRefresh:
		return "lease"
	case Refund:
		return "refund"
	case SyncPush:
		return "sync"
	case StoreError:
		return "store-error"
	case StoreRecovered:
		return "store-recovered"
	}
	return "unknown"
}

// Event is one thing a Store did, passed to the WithObserver callback.
// The local-hit ratio is LocalDecision / (LocalDecision + StoreDecision).
type Event struct {
	Kind      EventKind
	Namespace string
	Key       string
	// Units is the lease size, refund or pushed consumption; for a
	// decision, its cost.
	Units int64
	// Allowed reports, for a decision, whether it admitted.
	Allowed bool
	// Shard is the sub-key index of a sharded key, 0 otherwise.
	Shard int
	// Err is the failure of a StoreError, Refund, SyncPush or
	// DegradedDecision event.
	Err error
}
