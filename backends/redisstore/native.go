package redisstore

import (
	"context"
	_ "embed"
	"math/bits"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/core/ratelimit"
)

//go:embed lua/native.lua
var nativeSrc string

var nativeScript = newScript(nativeSrc)

const (
	// nativeStride is the number of ARGV values per check in native.lua.
	nativeStride = 13
	// nativeSpanLimit bounds Period and the time to refill Burst for the
	// native path (2^51 ns, about 26 days): every span native.lua computes
	// then stays below 2^53, where Lua's doubles are exact.
	nativeSpanLimit = 1 << 51
	// debtCap is the largest debt span sent to native.lua; a larger one
	// behaves the same there, since the script falls back for any state
	// more than 2^51 ns in the future.
	debtCap = 1 << 52
)

// nativeAlg returns the native.lua code of an in-repo algorithm with a Lua
// program, or "" when there is none. Only the exact in-repo types match:
// another algorithm reusing a name takes the generic path.
func nativeAlg(alg ratelimit.Algorithm) string {
	switch alg.(type) {
	case gcra.Algorithm, *gcra.Algorithm:
		return "g"
	case tokenbucket.Algorithm, *tokenbucket.Algorithm:
		return "t"
	}
	return ""
}

// nativeCovers reports whether native.lua can apply every check exactly:
// an OpTake of an algorithm with a Lua program, under a limit whose Period
// and FillTime are at most 2^51 ns (about 26 days).
func nativeCovers(checks []ratelimit.Check) bool {
	for i := range checks {
		c := &checks[i]
		if c.Op != ratelimit.OpTake || nativeAlg(c.Algorithm) == "" {
			return false
		}
		if c.Limit.Period > nativeSpanLimit || c.Limit.FillTime() > nativeSpanLimit {
			return false
		}
	}
	return true
}

// units returns n·Period/Count as a span q + r/Count. The caller
// guarantees the quotient fits (n <= Burst and FillTime <= 2^51).
func units(n int64, l ratelimit.Limit) (q, r int64) {
	hi, lo := bits.Mul64(uint64(n), uint64(l.Period))
	uq, ur := bits.Div64(hi, lo, uint64(l.Count))
	return int64(uq), int64(ur)
}

// maxDebt mirrors the in-repo algorithms' debt bound:
// floor(MaxWindowSpan·Count/Period), at most 2^50.
func maxDebt(l ratelimit.Limit) int64 {
	return min(ratelimit.MulDivFloor(int64(ratelimit.MaxWindowSpan), l.Count, int64(l.Period)), 1<<50)
}

// applyNative runs every check in one native.lua call. When the script
// meets a state it cannot decide exactly (see native.lua) it writes
// nothing and the call is decided on the generic path.
func (s *Store) applyNative(ctx context.Context, checks []ratelimit.Check, keys []string, out []ratelimit.Outcome) (bool, error) {
	args := make([]any, 3, 3+nativeStride*len(checks))
	args[0], args[1] = "", ""
	if s.cfg.clock != nil {
		now := s.cfg.clock.Now()
		if now < 0 {
			return s.applyGeneric(ctx, checks, keys, out)
		}
		args[0], args[1] = strconv.FormatInt(now/1e9, 10), strconv.FormatInt(now%1e9, 10)
	}
	args[2] = s.marginArg
	for i := range checks {
		args = append(args, s.checkArgs(&checks[i])...)
	}
	s.nativeCalls.Add(1)
	reply, err := s.run(ctx, nativeScript, keys, args)
	if err != nil {
		return false, err
	}
	arr, ok := reply.([]any)
	if !ok || len(arr) == 0 {
		return false, unexpected(reply)
	}
	status, ok := arr[0].(int64)
	switch {
	case !ok:
		return false, unexpected(reply)
	case status == -1 && len(arr) == 1:
		s.nativeFallbacks.Add(1)
		return s.applyGeneric(ctx, checks, keys, out)
	case len(arr) != 1+6*len(checks):
		return false, unexpected(reply)
	}
	for i := range checks {
		var v [6]int64
		for j := range v {
			if v[j], ok = arr[1+6*i+j].(int64); !ok {
				return false, unexpected(reply)
			}
		}
		retry := time.Duration(v[3])
		if v[3] < 0 {
			retry = ratelimit.Never
		}
		out[i] = ratelimit.Outcome{
			Allowed:    v[0] == 1,
			Changed:    v[1] == 1,
			Remaining:  v[2],
			RetryAfter: retry,
			ResetAfter: time.Duration(v[4]),
			TTL:        time.Duration(v[5]),
		}
	}
	return status == 1, nil
}

// debtSpan returns units(maxDebt(l)) when it is below debtCap.
func debtSpan(l ratelimit.Limit) (q, r int64, ok bool) {
	d := maxDebt(l)
	hi, lo := bits.Mul64(uint64(d), uint64(l.Period))
	if hi >= uint64(l.Count) {
		return 0, 0, false
	}
	uq, ur := bits.Div64(hi, lo, uint64(l.Count))
	if uq >= debtCap {
		return 0, 0, false
	}
	return int64(uq), int64(ur), true
}

// argsKey identifies the native.lua arguments of a check.
type argsKey struct {
	code string
	cost int64
	lim  ratelimit.Limit
}

// maxCachedArgs bounds the argument cache; checks beyond it build their
// arguments on each call.
const maxCachedArgs = 4096

// checkArgs returns the nativeStride arguments of c. They depend only on
// the algorithm, the cost and the limit, so they are cached (boxing a dozen
// int64 values is most of a call's allocations); the returned slice must
// not be modified.
func (s *Store) checkArgs(c *ratelimit.Check) []any {
	k := argsKey{nativeAlg(c.Algorithm), c.Cost, c.Limit}
	if v, ok := s.argsCache.Load(k); ok {
		return v.([]any)
	}
	l := c.Limit
	var p [8]int64
	if k.code == "g" {
		p[0], p[1] = units(l.Burst, l)
		if c.Cost <= l.Burst {
			p[2], p[3] = units(c.Cost, l)
		}
		p[4], p[5] = units(1, l)
		dq, dr, ok := debtSpan(l)
		if !ok {
			dq, dr = debtCap, 0
		}
		p[6], p[7] = dq, dr
	}
	a := make([]any, 0, nativeStride)
	a = append(a, k.code, c.Cost, l.Burst, l.Count, int64(l.Period))
	for _, v := range p {
		a = append(a, v)
	}
	if s.argsCached.Load() < maxCachedArgs {
		if _, loaded := s.argsCache.LoadOrStore(k, a); !loaded {
			s.argsCached.Add(1)
		}
	}
	return a
}
