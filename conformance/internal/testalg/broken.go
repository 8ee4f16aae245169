package testalg

import (
	"errors"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// Flaw names a deliberate bug of Broken.
type Flaw string

// Flaws Broken can have, each breaking one rule of the Algorithm contract.
const (
	// EarlyRetry reports a RetryAfter one nanosecond short.
	EarlyRetry Flaw = "early-retry"
	// PeekWrites records a peek as if it took one unit.
	PeekWrites Flaw = "peek-writes"
	// BackwardsMints treats an instant before the recorded window as a
	// new window, so a clock going back mints a fresh quota.
	BackwardsMints Flaw = "backwards-mints"
	// PanicsOnGarbage indexes into states of the wrong length.
	PanicsOnGarbage Flaw = "panics-on-garbage"
	// BurstPerPeriod admits Burst per window of Period, the old meaning
	// of a window's limit: twice the rate of a token bucket for Burst =
	// 2·Count.
	BurstPerPeriod Flaw = "burst-per-period"
	// PlainRefusal refuses limits whose Burst is not Count with an error
	// that does not wrap ratelimit.ErrInvalidLimit.
	PlainRefusal Flaw = "plain-refusal"
)

// Broken is Window with one deliberate Flaw, for proving that the
// conformance suites catch it. Its zero value has no flaw.
type Broken struct {
	Flaw Flaw
}

// Name returns the flaw's name prefixed with "testalg-broken-".
func (b Broken) Name() string { return "testalg-broken-" + string(b.Flaw) }

// Decide implements ratelimit.Algorithm, badly.
func (b Broken) Decide(state []byte, now int64, l ratelimit.Limit, cost int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	switch b.Flaw {
	case PanicsOnGarbage:
		if len(state) > 0 && len(state) != stateLen {
			_ = state[stateLen] // the bug: trusts the length
		}
	case BackwardsMints:
		if start, _, err := decode(state); err == nil && len(state) > 0 && now < start {
			state = nil
		}
	case BurstPerPeriod:
		l.Count = l.Burst
	case PeekWrites:
		if cost == 0 {
			o, out, err := Window{}.Decide(state, now, l, 1, dst)
			if o.Allowed {
				o.Remaining++ // report the peek as one, but keep the write
			}
			return o, out, err
		}
	}
	o, out, err := Window{}.Decide(state, now, l, cost, dst)
	if b.Flaw == EarlyRetry && o.RetryAfter > 1 && o.RetryAfter != ratelimit.Never {
		o.RetryAfter--
	}
	return o, out, err
}

// ValidateLimit implements ratelimit.LimitValidator: it accepts every
// limit, but with PlainRefusal.
func (b Broken) ValidateLimit(l ratelimit.Limit) error {
	if b.Flaw == PlainRefusal && l.Burst != l.Count {
		return errors.New("testalg: burst is not count")
	}
	return nil
}

var (
	_ ratelimit.Algorithm      = Broken{}
	_ ratelimit.LimitValidator = Broken{}
)
