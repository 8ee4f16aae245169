package storetest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// testCorruptState names one key with two algorithms whose state encodings
// differ: where the second algorithm cannot decode the first one's state,
// the store must say ErrCorruptState, leave the state as it is, and let
// Reset clear it.
func (s *suite) testCorruptState(t *testing.T) {
	algs := s.h.Algorithms
	if len(algs) < 2 {
		t.Skip("storetest: needs two algorithms")
	}
	checked := 0
	for i, writer := range algs {
		reader := algs[(i+1)%len(algs)]
		// Does reader reject writer's state? Ask the algorithms directly.
		l := s.frozen(5)
		_, state, err := writer.Decide(nil, s.now(), l, 2, nil)
		if err != nil || len(state) == 0 {
			continue
		}
		if _, _, err := reader.Decide(state, s.now(), l, 1, nil); !errors.Is(err, ratelimit.ErrCorruptState) {
			continue
		}
		checked++
		t.Run(writer.Name()+"-read-by-"+reader.Name(), func(t *testing.T) {
			r := s.rng()
			s.startClock()
			st := s.stores(t, 1)[0]
			w := ratelimit.Check{Namespace: "corrupt", Key: newKey(t, r, "mixed"), Algorithm: writer, Limit: l, Cost: 2}
			s.take(t, st, w)
			rd := w
			rd.Algorithm, rd.Cost = reader, 1
			if _, err := s.apply(t, st, rd); !errors.Is(err, ratelimit.ErrCorruptState) {
				t.Fatalf("%s on a key holding %s state: %v, want ErrCorruptState", reader.Name(), writer.Name(), err)
			}
			if _, _, err := s.applyAll(t, st, []ratelimit.Check{rd}); !errors.Is(err, ratelimit.ErrCorruptState) {
				t.Errorf("ApplyAll of %s on a key holding %s state: %v, want ErrCorruptState", reader.Name(), writer.Name(), err)
			}
			if got := s.remaining(t, st, w); got != 3 {
				t.Errorf("%s sees Remaining %d after the failed reads, want 3: the store changed undecodable state", writer.Name(), got)
			}
			ctx, cancel := s.opContext(t)
			defer cancel()
			if err := st.Reset(ctx, w.Namespace, w.Key); err != nil {
				t.Fatalf("Reset: %v", err)
			}
			s.expectSettle(t, func() string {
				if o, err := s.apply(t, st, rd); err != nil || !o.Allowed {
					return fmt.Sprintf("%s after Reset: %+v, %v; want allowed", reader.Name(), o, err)
				}
				return ""
			})
		})
	}
	if checked == 0 {
		t.Skip("storetest: no pair of the algorithms rejects the other's state")
	}
}
