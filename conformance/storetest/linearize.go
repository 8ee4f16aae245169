package storetest

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// Linearizability parameters: workers goroutines over stores clients make
// ops calls each on keys keys of burst units.
const (
	linWorkers = 8
	linStores  = 4
	linOps     = 30
	linKeys    = 3
	linBurst   = 6
	linTimeout = 20 * time.Second
)

// linInput is one call of a history: a take (cost 0 peeks) or a reset.
type linInput struct {
	key   string
	reset bool
	cost  int64
}

// linOutput is what the call returned; unknown marks a call whose effect
// is unknown (ErrUnknownOutcome), which may or may not have happened.
type linOutput struct {
	allowed   bool
	remaining int64
	unknown   bool
}

// linModel is the sequential specification of one key: the algorithm
// itself, evaluated at the fixed instant now under limit l. Its state is
// the algorithm's encoded state as a string.
func linModel(alg ratelimit.Algorithm, l ratelimit.Limit, now int64) porcupine.Model {
	return (&porcupine.NondeterministicModel{
		Init: func() []any { return []any{""} },
		Step: func(state, input, output any) []any {
			st, in, out := state.(string), input.(linInput), output.(linOutput)
			if in.reset {
				if out.unknown {
					return []any{st, ""}
				}
				return []any{""}
			}
			o, next, err := alg.Decide([]byte(st), now, l, in.cost, nil)
			if err != nil {
				return nil
			}
			after := st
			if o.Changed {
				after = string(next)
			}
			switch {
			case out.unknown:
				return []any{st, after}
			case o.Allowed == out.allowed && o.Remaining == out.remaining:
				return []any{after}
			}
			return nil
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(linInput), output.(linOutput)
			op := fmt.Sprintf("take(%d)", in.cost)
			if in.reset {
				op = "reset"
			}
			switch {
			case out.unknown:
				return op + " -> unknown outcome"
			case in.reset:
				return op + " -> ok"
			}
			return fmt.Sprintf("%s -> allowed=%t remaining=%d", op, out.allowed, out.remaining)
		},
	}).ToModel()
}

// testLinearizable records concurrent histories of takes, peeks and resets
// on a few keys from several clients and checks with porcupine that each
// key's history is linearizable against the algorithm's sequential
// behaviour. Calls failing with ErrUnavailable are dropped (they certainly
// did not happen); calls failing with ErrUnknownOutcome may have happened
// at any time after their start.
func (s *suite) testLinearizable(t *testing.T) {
	if s.h.Approximate != nil {
		t.Skip("storetest: approximate store: histories are not linearizable by design (Contention checks the bound)")
	}
	s.forEachAlg(t, func(t *testing.T, alg ratelimit.Algorithm) {
		r := s.rng()
		s.startClock()
		now := s.now()
		sts := s.stores(t, linStores)
		l := s.frozen(linBurst)
		ns := fmt.Sprintf("lin%x", r.Uint32())
		keys := make([]string, linKeys)
		for i := range keys {
			keys[i] = newKey(t, r, fmt.Sprintf("lin%d", i))
		}
		plans := make([][]linInput, linWorkers)
		for w := range plans {
			for range linOps {
				in := linInput{key: keys[r.IntN(len(keys))], cost: r.Int64N(3)}
				in.reset = r.IntN(15) == 0
				plans[w] = append(plans[w], in)
			}
		}
		var (
			mu      sync.Mutex
			history []porcupine.Operation
			wg      sync.WaitGroup
			start   = time.Now()
		)
		for w, plan := range plans {
			st := sts[w%len(sts)]
			wg.Go(func() {
				for _, in := range plan {
					call := time.Since(start).Nanoseconds()
					var out linOutput
					var err error
					if in.reset {
						ctx, cancel := s.opContext(t)
						err = st.Reset(ctx, ns, in.key)
						cancel()
					} else {
						var o ratelimit.Outcome
						o, err = s.apply(t, st, ratelimit.Check{Namespace: ns, Key: in.key, Algorithm: alg, Limit: l, Cost: in.cost})
						out = linOutput{allowed: o.Allowed, remaining: o.Remaining}
					}
					ret := time.Since(start).Nanoseconds()
					switch {
					case errors.Is(err, ratelimit.ErrUnavailable):
						continue
					case errors.Is(err, ratelimit.ErrUnknownOutcome):
						out, ret = linOutput{unknown: true}, math.MaxInt64
					case err != nil:
						t.Errorf("worker %d: unexpected error: %v", w, err)
						continue
					}
					mu.Lock()
					history = append(history, porcupine.Operation{ClientId: w, Input: in, Call: call, Output: out, Return: ret})
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		model := linModel(alg, l, now)
		for i, key := range keys {
			var part []porcupine.Operation
			for _, op := range history {
				if op.Input.(linInput).key == key {
					part = append(part, op)
				}
			}
			switch res := porcupine.CheckOperationsTimeout(model, part, linTimeout); res {
			case porcupine.Illegal:
				t.Errorf("key %d: history of %d operations is not linearizable:\n%s", i, len(part), renderHistory(model, part))
			case porcupine.Unknown:
				t.Logf("key %d: linearizability check of %d operations timed out after %s; no verdict", i, len(part), linTimeout)
			}
		}
	})
}

// renderHistory lists a partition's operations by call time for a
// failure message.
func renderHistory(m porcupine.Model, ops []porcupine.Operation) string {
	ops = slices.Clone(ops)
	slices.SortFunc(ops, func(a, b porcupine.Operation) int { return int(min(max(a.Call-b.Call, -1), 1)) })
	var b strings.Builder
	for _, op := range ops {
		ret := fmt.Sprint(op.Return)
		if op.Return == math.MaxInt64 {
			ret = "∞"
		}
		fmt.Fprintf(&b, "  client %d [%d, %s] %s\n", op.ClientId, op.Call, ret, m.DescribeOperation(op.Input, op.Output))
	}
	return b.String()
}
