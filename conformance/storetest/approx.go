package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// An approximate store (Harness.Approximate set) is only eventually
// consistent: a write through one client reaches the others after a
// synchronisation delay, and a client may hold back a take on a key it
// has just met (a gossip cluster's startup allowance, for example). The
// suite therefore waits for it, up to settleTimeout, polling every
// settlePoll, wherever it expects a write to be visible through another
// client or a take on a quiescent key to be admitted. An exact store gets
// a single try: every write must be visible on the next call.
const (
	settleTimeout = 5 * time.Second
	settlePoll    = 5 * time.Millisecond
)

// settle calls check until it returns "" and returns its last message:
// once for an exact store; for an approximate one, again every settlePoll
// until settleTimeout has passed. check must change nothing when it
// fails, so that repeating it is sound.
func (s *suite) settle(check func() string) string {
	msg := check()
	if msg == "" || s.h.Approximate == nil {
		return msg
	}
	deadline := time.Now().Add(settleTimeout)
	for msg != "" && time.Now().Before(deadline) {
		time.Sleep(settlePoll) // polling an eventually consistent store: there is no event to wait on
		msg = check()
	}
	if msg != "" {
		msg += fmt.Sprintf(" (still so after waiting %s for the approximate store to settle)", settleTimeout)
	}
	return msg
}

// mustSettle is settle that fails the check at once when check never
// passes.
func (s *suite) mustSettle(t *testing.T, check func() string) {
	t.Helper()
	if msg := s.settle(check); msg != "" {
		t.Fatal(msg)
	}
}

// expectSettle is settle that reports a failure and lets the check go on
// when check never passes.
func (s *suite) expectSettle(t *testing.T, check func() string) {
	t.Helper()
	if msg := s.settle(check); msg != "" {
		t.Error(msg)
	}
}

// visible waits, for an approximate store, until st reports want units
// remaining for c's key, so that the next step starts from a state every
// client shares. For an exact store it does nothing: every write is
// visible at once, which the checks themselves assert.
func (s *suite) visible(t *testing.T, st ratelimit.Store, c ratelimit.Check, want int64) {
	t.Helper()
	if s.h.Approximate == nil {
		return
	}
	s.mustSettle(t, func() string {
		if got := s.remaining(t, st, c); got != want {
			return fmt.Sprintf("%s: Remaining = %d through another client, want %d: the write never became visible", describe(c), got, want)
		}
		return ""
	})
}

// take applies c, a take the check expects to be admitted, and returns its
// outcome. For an exact store it applies c once and leaves the outcome to
// the caller. For an approximate store a denied take changes nothing, so
// it is repeated until admitted; a take still denied after settleTimeout
// fails the check.
func (s *suite) take(t *testing.T, st ratelimit.Store, c ratelimit.Check) ratelimit.Outcome {
	t.Helper()
	o := s.mustApply(t, st, c)
	if s.h.Approximate == nil || o.Allowed {
		return o
	}
	s.mustSettle(t, func() string {
		if o = s.mustApply(t, st, c); !o.Allowed {
			return fmt.Sprintf("%s on a quiescent key: denied (%+v), want admitted", describe(c), o)
		}
		return ""
	})
	return o
}

// takeAll is take for a composite: for an approximate store a denied
// composite, which changes nothing, is repeated until admitted. An error
// fails the check.
func (s *suite) takeAll(t *testing.T, st ratelimit.Store, checks []ratelimit.Check) (bool, []ratelimit.Outcome) {
	t.Helper()
	ok, out, err := s.applyAll(t, st, checks)
	if err != nil {
		t.Fatalf("ApplyAll of %d checks: %v", len(checks), err)
	}
	if s.h.Approximate == nil || ok {
		return ok, out
	}
	s.mustSettle(t, func() string {
		if ok, out, err = s.applyAll(t, st, checks); err != nil {
			t.Fatalf("ApplyAll of %d checks: %v", len(checks), err)
		}
		if !ok {
			return fmt.Sprintf("composite of %d checks starting with %s on quiescent keys: denied (%+v), want admitted", len(checks), describe(checks[0]), out)
		}
		return ""
	})
	return ok, out
}
