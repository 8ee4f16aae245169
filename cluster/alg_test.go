package cluster

import (
	"encoding/binary"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// testGCRA is a minimal GCRA with the Charger capability, used until the
// in-repo algorithms are available to this module's tests. State is the
// theoretical arrival time (8 bytes, big endian).
type testGCRA struct{}

func (testGCRA) Name() string { return "test-gcra" }

func (testGCRA) tat(state []byte, now int64) (int64, error) {
	if len(state) == 0 {
		return now, nil
	}
	if len(state) != 8 {
		return 0, ratelimit.ErrCorruptState
	}
	return max(int64(binary.BigEndian.Uint64(state)), now), nil
}

func (g testGCRA) Decide(state []byte, now int64, l ratelimit.Limit, cost int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	tat, err := g.tat(state, now)
	if err != nil {
		return ratelimit.Outcome{}, dst[:0], err
	}
	tau := int64(l.FillTime())
	remaining := func(t int64) int64 {
		return min(max(ratelimit.MulDivFloor(now+tau-t, l.Count, int64(l.Period)), 0), l.Burst)
	}
	if cost > l.Burst {
		return ratelimit.Outcome{RetryAfter: ratelimit.Never, Remaining: remaining(tat)}, append(dst[:0], state...), nil
	}
	if cost == 0 {
		one := tat + int64(ratelimit.MulDivCeil(1, int64(l.Period), l.Count))
		o := ratelimit.Outcome{Allowed: one-now <= tau, Remaining: remaining(tat), TTL: time.Duration(max(tat-now, 0))}
		if !o.Allowed {
			o.RetryAfter = time.Duration(one - tau - now)
		}
		return o, append(dst[:0], state...), nil
	}
	next := tat + int64(ratelimit.MulDivCeil(cost, int64(l.Period), l.Count))
	if next-now > tau {
		return ratelimit.Outcome{Remaining: remaining(tat), RetryAfter: time.Duration(next - tau - now), ResetAfter: time.Duration(max(tat-now, 0)), TTL: time.Duration(max(tat-now, 0))}, append(dst[:0], state...), nil
	}
	out := binary.BigEndian.AppendUint64(dst[:0], uint64(next))
	return ratelimit.Outcome{Allowed: true, Changed: true, Remaining: remaining(next), ResetAfter: time.Duration(next - now), TTL: time.Duration(next - now)}, out, nil
}

func (g testGCRA) Charge(state []byte, now int64, l ratelimit.Limit, amount int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	tat, err := g.tat(state, now)
	if err != nil {
		return ratelimit.Outcome{}, dst[:0], err
	}
	tau := int64(l.FillTime())
	next := min(tat+int64(ratelimit.MulDivCeil(amount, int64(l.Period), l.Count)), now+8*tau)
	out := binary.BigEndian.AppendUint64(dst[:0], uint64(next))
	return ratelimit.Outcome{Allowed: true, Changed: next != tat || len(state) == 0, ResetAfter: time.Duration(next - now), TTL: time.Duration(next - now)}, out, nil
}

// plainAlg is an algorithm without the Charger capability.
type plainAlg struct{ g testGCRA }

func (plainAlg) Name() string { return "plain" }

func (p plainAlg) Decide(state []byte, now int64, l ratelimit.Limit, cost int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	return p.g.Decide(state, now, l, cost, dst)
}
