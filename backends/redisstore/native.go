package redisstore

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/sluicehq/sluice/algorithms/fixedwindow"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/algorithms/leakybucket"
	"github.com/sluicehq/sluice/algorithms/slidinglog"
	"github.com/sluicehq/sluice/algorithms/slidingwindow"
	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/arith"
	"github.com/sluicehq/sluice/internal/window"
)

//go:embed lua/native.lua
var nativeSrc string

var nativeScript = newScript(nativeSrc)

const (
	// nativeStride is the number of doubles of native.lua's argument for
	// one check.
	nativeStride = 14
	// nativeSpanLimit bounds Period and the time to refill Burst for the
	// native path (2^51 ns, about 26 days): every span native.lua computes
	// then stays below 2^53, where Lua's doubles are exact.
	nativeSpanLimit = 1 << 51
	// debtCap is the largest debt span sent to native.lua; a larger one
	// behaves the same there, since the script falls back for any state
	// more than 2^51 ns in the future.
	debtCap = 1 << 52
)

// Algorithm codes of native.lua.
const (
	codeNone = iota
	codeGCRA
	codeTokenBucket
	codeLeakyBucket
	codeFixedWindow
	codeSlidingWindow
	codeSlidingLog
)

// nativeAlg returns the native.lua code of an in-repo algorithm with a Lua
// program, or codeNone when there is none. Only the exact in-repo types
// match: another algorithm reusing a name takes the generic path.
func nativeAlg(alg ratelimit.Algorithm) int {
	switch alg.(type) {
	case gcra.Algorithm, *gcra.Algorithm:
		return codeGCRA
	case tokenbucket.Algorithm, *tokenbucket.Algorithm:
		return codeTokenBucket
	case leakybucket.Algorithm, *leakybucket.Algorithm:
		return codeLeakyBucket
	case fixedwindow.Algorithm, *fixedwindow.Algorithm:
		return codeFixedWindow
	case slidingwindow.Algorithm, *slidingwindow.Algorithm:
		return codeSlidingWindow
	case slidinglog.Algorithm, *slidinglog.Algorithm:
		return codeSlidingLog
	}
	return codeNone
}

// nativeCovers reports whether native.lua can apply every check exactly:
// an OpTake of an algorithm with a Lua program, an OpReserve or OpRefund
// of gcra, tokenbucket or leakybucket, or an OpCharge of any of them but
// slidinglog (which has no Charge: its charges take the generic path,
// which reports ratelimit.ErrUnsupported), under a limit whose Period and
// FillTime are at most 2^51 ns (about 26 days).
func nativeCovers(checks []ratelimit.Check) bool {
	for i := range checks {
		c := &checks[i]
		code := nativeAlg(c.Algorithm)
		switch {
		case code == codeNone:
			return false
		case c.Op == ratelimit.OpTake:
		case (c.Op == ratelimit.OpReserve || c.Op == ratelimit.OpRefund) &&
			(code == codeGCRA || code == codeTokenBucket || code == codeLeakyBucket):
		case c.Op == ratelimit.OpCharge && code != codeSlidingLog:
		default:
			return false
		}
		l := c.Limit
		if isWindow(code) {
			l = window.Of(l)
		}
		if l.Period > nativeSpanLimit || l.FillTime() > nativeSpanLimit {
			return false
		}
	}
	return true
}

// isWindow reports whether code is a window algorithm's: native.lua gets
// its limit as one window (window.Of), exactly as the Go algorithm sees it.
func isWindow(code int) bool {
	return code == codeFixedWindow || code == codeSlidingWindow || code == codeSlidingLog
}

// units returns n·Period/Count as a span q + r/Count. The caller
// guarantees the quotient fits (n <= Burst and FillTime <= 2^51).
func units(n int64, l ratelimit.Limit) (q, r int64) {
	hi, lo := bits.Mul64(uint64(n), uint64(l.Period))
	uq, ur := bits.Div64(hi, lo, uint64(l.Count))
	return int64(uq), int64(ur)
}

// numCodes is the number of native algorithm codes (1..numCodes-1).
const numCodes = codeSlidingLog + 1

// headArg returns native.lua's first argument: the PEXPIRE margin in
// milliseconds; with a test clock, now as Unix seconds and nanoseconds
// (-1 and 0 for the server's TIME); then one flag per algorithm code, 1
// when mask has bit code-1 (the script creates only the functions of the
// algorithms a call uses). ok is false for a test instant before 1970,
// which native.lua does not handle.
func (s *Store) headArg(mask uint) (arg any, ok bool) {
	if s.cfg.clock == nil {
		return s.headArgs[mask], true
	}
	now := s.cfg.clock.Now()
	if now < 0 {
		return nil, false
	}
	return string(s.appendHead(nil, now/1e9, now%1e9, mask)), true
}

// appendHead appends the doubles of headArg.
func (s *Store) appendHead(b []byte, sec, ns int64, mask uint) []byte {
	b = appendDoubles(b, int64(s.cfg.ttlMargin/time.Millisecond), sec, ns)
	for c := uint(1); c < numCodes; c++ {
		b = appendDoubles(b, int64(mask>>(c-1)&1))
	}
	return b
}

// appendDoubles appends each value as a little-endian IEEE 754 double,
// the encoding native.lua decodes with struct.unpack. Every value must be
// an integer of magnitude below 2^53, which a double holds exactly.
func appendDoubles(b []byte, vs ...int64) []byte {
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(v)))
	}
	return b
}

// applyNative runs every check in one native.lua call. When the script
// meets a state it cannot decide exactly (see native.lua) it writes
// nothing and the call is decided on the generic path.
func (s *Store) applyNative(ctx context.Context, deadline time.Time, checks []ratelimit.Check, keys []string, out []ratelimit.Outcome) (bool, error) {
	var (
		mask uint
		arg  any // the checks' arguments, one after another
	)
	for i := range checks {
		mask |= 1 << (nativeAlg(checks[i].Algorithm) - 1)
	}
	if len(checks) == 1 {
		arg = s.checkArg(&checks[0]) // already boxed: nothing allocated
	} else {
		b := make([]byte, 0, 8*nativeStride*len(checks))
		for i := range checks {
			b = s.appendCheckArg(b, &checks[i])
		}
		arg = string(b)
	}
	var (
		status int64
		err    error
	)
	if b := s.batcherFor(keys); b != nil && !b.startAlone() {
		status, err = s.applyCoalesced(ctx, deadline, b, checks, keys, arg, mask, out)
	} else {
		// No coalescing, or a batch of this call alone would be sent now:
		// send it as it is, without the batch's bookkeeping.
		dctx, cancel := withDeadline(ctx, deadline)
		status, err = s.runNative(dctx, checks, keys, arg, mask, out)
		cancel()
		if b != nil {
			s.finishAlone(b)
		}
	}
	if err != nil {
		return false, err
	}
	if status == -1 {
		s.nativeFallbacks.Add(1)
		ctx, cancel := withDeadline(ctx, deadline)
		defer cancel()
		return s.applyGeneric(ctx, checks, keys, out)
	}
	return status == 1, nil
}

// runNative sends one native.lua call, arg holding its checks'
// arguments, and decodes its outcomes into out. Status -1 means the
// generic path must decide it.
func (s *Store) runNative(ctx context.Context, checks []ratelimit.Check, keys []string, arg any, mask uint, out []ratelimit.Outcome) (int64, error) {
	head, ok := s.headArg(mask)
	if !ok {
		return -1, nil
	}
	s.nativeCalls.Add(1)
	args := [2]any{head, arg} // run copies them
	reply, err := s.run(ctx, nativeScript, keys, args[:])
	if err != nil {
		return 0, err
	}
	rep, ok := reply.(string)
	if !ok {
		return 0, unexpected(reply)
	}
	now, rest, err := splitNow(rep)
	if err != nil {
		return 0, unexpected(reply)
	}
	status, part, rest, err := splitCall(rest, len(checks))
	if err != nil || rest != "" {
		return 0, unexpected(reply)
	}
	var scratch []byte
	if err := decodeNative(part, status, now, checks, out, &scratch); err != nil {
		return 0, err
	}
	return status, nil
}

// errBadReply marks a native.lua reply that the store cannot read.
var errBadReply = errors.New("redisstore: bad native reply")

// splitNow returns the server's instant at the start of a native.lua
// reply, in Unix nanoseconds, and the rest of the reply: one part per
// call.
func splitNow(rep string) (now int64, rest string, err error) {
	if len(rep) < 8 {
		return 0, "", errBadReply
	}
	hi, lo := int64(int32(bigEndian32(rep))), int64(bigEndian32(rep[4:]))
	return hi<<32 | lo, rep[8:], nil
}

// splitCall splits the part of a call of n checks off the start of rest:
// its status (1 allowed and written, 0 denied, -1 for the generic path)
// and, unless -1, the states native.lua found for its checks, each its
// length in one byte (255, then four big-endian bytes, for 255 or more)
// and its bytes.
func splitCall(rest string, n int) (status int64, part, tail string, err error) {
	if rest == "" {
		return 0, "", "", errBadReply
	}
	switch rest[0] {
	case 255:
		return -1, "", rest[1:], nil
	case 0, 1:
		status = int64(rest[0])
	default:
		return 0, "", "", errBadReply
	}
	size := 1
	for range n {
		l, hdr, ok := stateLen(rest[size:])
		if !ok || len(rest) < size+hdr+l {
			return 0, "", "", errBadReply
		}
		size += hdr + l
	}
	return status, rest[1:size], rest[size:], nil
}

// stateLen reads the length of a framed state at the start of b: the
// length and the size of its header.
func stateLen(b string) (n, hdr int, ok bool) {
	switch {
	case b == "":
		return 0, 0, false
	case b[0] < 255:
		return int(b[0]), 1, true
	case len(b) < 5:
		return 0, 0, false
	}
	return int(bigEndian32(b[1:])), 5, true
}

// bigEndian32 reads a big-endian uint32 at the start of b.
func bigEndian32(b string) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// decodeNative writes to out the outcome of each check of a call whose
// part of the reply splitCall returned: the check's algorithm run in Go
// on the state native.lua found, at the server's now. native.lua
// reproduces the Go algorithms bit for bit, so these are the outcomes it
// decided; the status must agree with them (every take and reservation
// allowed when it is 1, one denied when 0). scratch is a buffer for the
// states, grown as needed.
func decodeNative(part string, status int64, now int64, checks []ratelimit.Check, out []ratelimit.Outcome, scratch *[]byte) error {
	if status == -1 {
		return nil
	}
	allowed := true
	for i := range checks {
		l, hdr, _ := stateLen(part)
		b := *scratch
		if cap(b) < 2*l+64 {
			// room after the state for the new one the algorithm writes
			b = make([]byte, 0, 2*l+64)
			*scratch = b
		}
		b = append(b[:0], part[hdr:hdr+l]...)
		part = part[hdr+l:]
		var state []byte
		if l > 0 {
			state = b
		}
		c := &checks[i]
		o, _, err := ratelimit.Evaluate(c.Algorithm, c.Op, state, now, c.Limit, c.Cost, c.MaxWait, b[l:l])
		if err != nil {
			return err
		}
		out[i] = o
		if (c.Op == ratelimit.OpTake || c.Op == ratelimit.OpReserve) && !o.Allowed {
			allowed = false
		}
	}
	if allowed != (status == 1) {
		return fmt.Errorf("%w: redisstore: native.lua's status %d disagrees with the Go algorithms' outcomes", ratelimit.ErrUnknownOutcome, status)
	}
	return nil
}

// debtSpan returns units(arith.MaxDebt(l)) when it is below debtCap.
func debtSpan(l ratelimit.Limit) (q, r int64, ok bool) {
	d := arith.MaxDebt(l)
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

// argsKey identifies the native.lua argument of a check, but for a
// reservation's MaxWait.
type argsKey struct {
	code int
	op   ratelimit.Op
	cost int64
	lim  ratelimit.Limit
}

// maxCachedArgs bounds the argument cache; checks beyond it build their
// argument on each call.
const maxCachedArgs = 4096

// checkArg returns native.lua's argument for c: nativeStride doubles (see
// appendDoubles), the last MaxWait (0 but for a reservation).
// Everything but a reservation's MaxWait depends only on the algorithm,
// the op, the cost and the limit, so it is cached, already boxed as an
// interface value; a reservation's is built on each call.
func (s *Store) checkArg(c *ratelimit.Check) any {
	v := s.cachedArg(c)
	if c.Op != ratelimit.OpReserve {
		return v
	}
	a, _ := v.(string)
	return string(appendMaxWait([]byte(a[:len(a)-8]), c.MaxWait))
}

// appendCheckArg appends checkArg(c) to b.
func (s *Store) appendCheckArg(b []byte, c *ratelimit.Check) []byte {
	a, _ := s.cachedArg(c).(string)
	if c.Op != ratelimit.OpReserve {
		return append(b, a...)
	}
	return appendMaxWait(append(b, a[:len(a)-8]...), c.MaxWait)
}

// appendMaxWait appends a reservation's MaxWait. It is exact below 2^53
// and any longer wait is as good as forever: no delay native.lua computes
// reaches 2^53 ns.
func appendMaxWait(b []byte, maxWait time.Duration) []byte {
	return appendDoubles(b, min(int64(maxWait), 1<<53-1))
}

// cachedArg returns native.lua's argument for c with a MaxWait of 0,
// from the store's cache when it holds it.
func (s *Store) cachedArg(c *ratelimit.Check) any {
	k := argsKey{nativeAlg(c.Algorithm), c.Op, c.Cost, c.Limit}
	v, ok := s.argsCache.Load(k)
	if !ok {
		v = buildArg(k)
		if s.argsCached.Load() < maxCachedArgs {
			if _, loaded := s.argsCache.LoadOrStore(k, v); !loaded {
				s.argsCached.Add(1)
			}
		}
	}
	return v
}

// buildArg builds native.lua's argument for k with a MaxWait of 0. Its
// first double is the algorithm's code plus 8 times the op (ratelimit's
// OpTake 0, OpReserve 1, OpRefund 2, OpCharge 3).
func buildArg(k argsKey) any {
	l := k.lim
	if isWindow(k.code) {
		l = window.Of(l)
	}
	var p [8]int64
	switch k.code {
	case codeGCRA:
		p[0], p[1] = units(l.Burst, l)
		switch {
		case k.op == ratelimit.OpRefund || k.op == ratelimit.OpCharge:
			p[2], p[3] = refundSpan(k.cost, l)
		case k.cost <= l.Burst:
			p[2], p[3] = units(k.cost, l)
		}
		p[4], p[5] = units(1, l)
		dq, dr, ok := debtSpan(l)
		if !ok {
			dq, dr = debtCap, 0
		}
		p[6], p[7] = dq, dr
	case codeTokenBucket, codeLeakyBucket:
		// the deepest debt, at most 2^50 units: exact in a double
		p[6] = arith.MaxDebt(l)
	case codeFixedWindow:
		// native.lua falls back for any count that reaches this cap
		p[0] = min(window.MaxUsed(l), 1<<51)
	}
	b := make([]byte, 0, 8*nativeStride)
	b = appendDoubles(b, int64(k.code)+8*int64(k.op), k.cost, l.Burst, l.Count, int64(l.Period))
	b = appendDoubles(b, p[:]...)
	b = appendDoubles(b, 0)
	return string(b)
}

// refundSpan returns units(min(amount, Burst+MaxDebt)), the span gcra's
// Refund adds and Charge takes, capped at debtCap: the script decides only
// states at most 2^51 ns in the future, which any span of 2^52 ns refills
// to full; it falls back for a charge of a capped span.
func refundSpan(amount int64, l ratelimit.Limit) (q, r int64) {
	x := min(amount, l.Burst+arith.MaxDebt(l))
	hi, lo := bits.Mul64(uint64(x), uint64(l.Period))
	if hi >= uint64(l.Count) {
		return debtCap, 0
	}
	uq, ur := bits.Div64(hi, lo, uint64(l.Count))
	if uq >= debtCap {
		return debtCap, 0
	}
	return int64(uq), int64(ur)
}
