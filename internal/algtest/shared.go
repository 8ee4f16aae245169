package algtest

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// FixedCorrupt returns undecodable states for an algorithm whose states
// are tag followed by stateLen−1 bytes: the tag alone, stateLen zero bytes
// (wrong tag), and the tag plus stateLen zero bytes (too long).
func FixedCorrupt(tag byte, stateLen int) [][]byte {
	return [][]byte{{tag}, make([]byte, stateLen), append([]byte{tag}, make([]byte, stateLen)...)}
}

// CorruptState checks that alg rejects every state in states with
// ratelimit.ErrCorruptState and writes nothing.
func CorruptState(t *testing.T, alg ratelimit.Algorithm, states [][]byte) {
	t.Helper()
	for _, s := range states {
		_, out, err := alg.Decide(s, 0, ratelimit.PerSecond(1), 1, nil)
		if !errors.Is(err, ratelimit.ErrCorruptState) || len(out) != 0 {
			t.Fatalf("state %x: %v", s, err)
		}
	}
}

// FuzzDecide is the body of every algorithm package's FuzzDecide: any
// state bytes, instant, valid limit and cost give ErrCorruptState or a
// sane outcome, and a peek or a denial changes nothing.
func FuzzDecide(f *testing.F, alg ratelimit.Algorithm) {
	_, s, _ := alg.Decide(nil, 1e18, ratelimit.PerSecond(10), 3, nil)
	f.Add(s, int64(1e18), int64(10), int64(time.Second), int64(10), int64(1))
	f.Add([]byte{}, int64(0), int64(1), int64(1), int64(1), int64(0))
	f.Fuzz(func(t *testing.T, state []byte, now, count, period, burst, cost int64) {
		l := ratelimit.Limit{Count: count, Period: time.Duration(period), Burst: burst}
		if l.Validate() != nil || cost < 0 || cost > ratelimit.MaxCost {
			return
		}
		o, out, err := alg.Decide(state, now, l, cost, nil)
		if err != nil {
			if !errors.Is(err, ratelimit.ErrCorruptState) {
				t.Fatal(err)
			}
			return
		}
		if o.Remaining < 0 || o.Remaining > burst || o.RetryAfter < 0 || o.TTL < 0 || o.ResetAfter < 0 {
			t.Fatalf("insane outcome %+v", o)
		}
		if o.Allowed == (o.RetryAfter != 0) {
			t.Fatalf("Allowed %v with RetryAfter %s", o.Allowed, o.RetryAfter)
		}
		if (cost == 0 || !o.Allowed) && (o.Changed || !bytes.Equal(out, state)) {
			t.Fatalf("cost %d, allowed %v: state %x changed to %x", cost, o.Allowed, state, out)
		}
	})
}

// BenchDecide measures Decide on one admitting key at 1,000,000 per
// second, one call per microsecond of its clock.
func BenchDecide(b *testing.B, alg ratelimit.Algorithm) {
	l := ratelimit.PerSecond(1_000_000)
	now := int64(1_700_000_000_000_000_000)
	_, state, _ := alg.Decide(nil, now, l, 1, nil)
	dst := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		now += 1000
		_, dst, _ = alg.Decide(state, now, l, 1, dst[:0])
	}
}
