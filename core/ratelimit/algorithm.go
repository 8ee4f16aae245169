package ratelimit

import (
	"fmt"
	"time"
)

// Algorithm decides admission from a compact state. It is the extension
// point for contributors: an Algorithm written once works on every Store.
//
// Implementations must be pure and safe for concurrent use: no I/O, no
// clock (the store supplies now), no global state, and no allocation on the
// hot path for states that fit in dst's capacity. The state is the
// algorithm's own byte encoding; stores treat it as an opaque value.
//
// The conformance suite github.com/sluicehq/sluice/conformance/algotest
// checks an implementation against the rules below.
type Algorithm interface {
	// Name identifies the algorithm and its state encoding, for example
	// "gcra". Stores may use it to select a native fast path, so a change
	// to the encoding must change the name.
	Name() string

	// Decide takes cost units at time now (Unix nanoseconds from the
	// store's clock) from state (nil or empty when the key has none).
	// It appends the new state to dst[:0] and returns it with the outcome.
	// dst must not overlap state: stores pass separate buffers.
	//
	// Rules every implementation follows:
	//   - cost 0 is a peek: Allowed reports whether one unit would pass,
	//     and the returned state equals the input (Changed is false);
	//   - a cost above limit.Burst is denied with RetryAfter == Never and
	//     nothing changes;
	//   - a denied call changes nothing (Changed is false);
	//   - now earlier than a time recorded in state is treated as that
	//     time: a clock going backwards never mints capacity;
	//   - RetryAfter is 0 when allowed and otherwise never negative and
	//     never early: after waiting it, the same cost passes if no other
	//     call intervened; a denied peek reports the wait for one unit;
	//   - RetryAfter, ResetAfter and TTL are measured from now, even when
	//     now is earlier than a time recorded in the state (stores expire
	//     state at now+TTL);
	//   - undecodable state is reported as ErrCorruptState.
	//
	// Callers must have validated limit and cost; Decide may assume
	// limit.Validate() == nil and 0 <= cost <= MaxCost.
	Decide(state []byte, now int64, limit Limit, cost int64, dst []byte) (Outcome, []byte, error)
}

// Outcome is what an Algorithm reports about one call.
type Outcome struct {
	// Allowed reports whether the cost was admitted (for a peek: whether
	// one unit would be).
	Allowed bool
	// Changed reports whether the returned state differs from the input,
	// so a store may skip a write when it is false.
	Changed bool
	// Remaining is how many units could be admitted right after this call,
	// never negative.
	Remaining int64
	// RetryAfter is how long to wait before the same cost can pass: 0 when
	// allowed, Never when it cannot pass at all.
	RetryAfter time.Duration
	// ResetAfter is how long until the state is back to its initial,
	// fully available value if nothing else is taken.
	ResetAfter time.Duration
	// Delay is, for a reservation, how long the caller must wait before
	// acting. It is 0 for Decide.
	Delay time.Duration
	// TTL is how long the store must keep the new state. After TTL the
	// state equals the initial state, so dropping it changes nothing. A TTL
	// of 0 means the state may be dropped now.
	TTL time.Duration
}

// Reserver is an optional Algorithm capability: take cost units now even if
// they are not yet available, by going into debt of at most maxWait, and
// report in Outcome.Delay how long the caller must wait before acting. It
// is what sluice.Limiter.ReserveN and WaitN use; a leaky bucket used this way
// is a queue that delays instead of dropping.
//
// When the delay would exceed maxWait, Reserve changes nothing and returns
// Allowed == false with RetryAfter set to the delay it would need.
type Reserver interface {
	Reserve(state []byte, now int64, limit Limit, cost int64, maxWait time.Duration, dst []byte) (Outcome, []byte, error)
}

// Refunder is an optional Algorithm capability: give back amount units
// taken earlier (Reservation.Cancel). Refunds never raise availability above
// the initial state.
type Refunder interface {
	Refund(state []byte, now int64, limit Limit, amount int64, dst []byte) (Outcome, []byte, error)
}

// Charger is an optional Algorithm capability: record amount units consumed
// elsewhere (another node of a gossip cluster) unconditionally. The state
// may go into debt, so the long-run admitted rate stays exact. The Outcome
// describes the state after the charge as a peek would: Allowed when one
// more unit would pass, RetryAfter until then, Remaining 0 while in debt.
type Charger interface {
	Charge(state []byte, now int64, limit Limit, amount int64, dst []byte) (Outcome, []byte, error)
}

// LimitValidator is an optional Algorithm capability: it refuses, with an
// error wrapping ErrInvalidLimit, a valid Limit that the algorithm cannot
// honour exactly (for example a window whose length Burst·Period/Count is
// not a whole number of nanoseconds). Check.Validate and the Limiter call
// it, so an algorithm never reinterprets such a limit.
type LimitValidator interface {
	ValidateLimit(l Limit) error
}

// Op selects what a store does with a Check.
type Op uint8

// Operations a Store applies. OpTake is the zero value.
const (
	// OpTake takes Cost units if available (Algorithm.Decide); cost 0 peeks.
	OpTake Op = iota
	// OpReserve takes Cost units now, waiting at most MaxWait (Reserver).
	OpReserve
	// OpRefund gives back Cost units (Refunder).
	OpRefund
	// OpCharge records Cost units consumed elsewhere (Charger).
	OpCharge
)

// String returns the operation's name.
func (o Op) String() string {
	switch o {
	case OpTake:
		return "take"
	case OpReserve:
		return "reserve"
	case OpRefund:
		return "refund"
	case OpCharge:
		return "charge"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Evaluate runs the operation op of alg on state. It is the generic path
// every Store can use: it dispatches to Decide or to the optional
// capability the operation needs, returning ErrUnsupported when alg lacks
// it. Inputs must already be validated (see [Check.Validate]).
func Evaluate(alg Algorithm, op Op, state []byte, now int64, limit Limit, cost int64, maxWait time.Duration, dst []byte) (Outcome, []byte, error) {
	switch op {
	case OpTake:
		return alg.Decide(state, now, limit, cost, dst)
	case OpReserve:
		if r, ok := alg.(Reserver); ok {
			return r.Reserve(state, now, limit, cost, maxWait, dst)
		}
	case OpRefund:
		if r, ok := alg.(Refunder); ok {
			return r.Refund(state, now, limit, cost, dst)
		}
	case OpCharge:
		if c, ok := alg.(Charger); ok {
			return c.Charge(state, now, limit, cost, dst)
		}
	}
	return Outcome{}, dst[:0], fmt.Errorf("%w: %s by algorithm %s", ErrUnsupported, op, alg.Name())
}
