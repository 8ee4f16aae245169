package redisstore

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/ratelimit"
)

var (
	//go:embed lua/read.lua
	readSrc string
	//go:embed lua/cas.lua
	casSrc string
)

// script is a Lua program run with EVALSHA, falling back to EVAL when the
// server's script cache does not hold it (after a restart, a failover or
// SCRIPT FLUSH). The source never depends on a request: keys and values
// travel as KEYS and ARGV.
type script struct {
	src string
	sha string
	// srcArg and shaArg are src and sha boxed once, so sending them
	// allocates nothing.
	srcArg, shaArg any
}

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(sum[:])
	return &script{src: src, sha: sha, srcArg: src, shaArg: sha}
}

var (
	readScript = newScript(readSrc)
	casScript  = newScript(casSrc)
)

// noRetryCmd is a go-redis command that go-redis never resends. The
// clients' retry loops (Client's MaxRetries, ClusterClient's MaxRedirects,
// Ring's MaxRetries) consult Cmder.NoRetry, so a script whose reply is lost
// is reported to the store instead of being run a second time (a double
// spend). Redirections on MOVED and ASK, which mean the script did not run,
// still happen.
type noRetryCmd struct{ *redis.Cmd }

// NoRetry reports true: a script must run at most once per call.
func (noRetryCmd) NoRetry() bool { return true }

// Clone keeps the no-retry marking on copies.
func (c noRetryCmd) Clone() redis.Cmder {
	if cc, ok := c.Cmd.Clone().(*redis.Cmd); ok {
		return noRetryCmd{cc}
	}
	return c.Cmd.Clone()
}

// run executes sc with keys and args in one round trip (two when the
// script must be sent again) and returns the reply, with errors classified.
// The command's arguments are built in a pooled slice, reused once the
// command has completed: keys travel as *string, which go-redis writes
// without boxing a copy. A hook that keeps a command's Args after it
// returns would see them change.
func (s *Store) run(ctx context.Context, sc *script, keys []string, args []any) (any, error) {
	ap := cmdArgsPool.Get().(*[]any)
	a := (*ap)[:0]
	a = append(a, "evalsha", sc.shaArg, len(keys))
	for i := range keys {
		a = append(a, &keys[i])
	}
	a = append(a, args...)
	cmd := noRetryCmd{redis.NewCmd(ctx, a...)}
	inFlight, v, err := s.do(ctx, cmd)
	if !inFlight && isNoScript(err) {
		a[0], a[1] = "eval", sc.srcArg
		cmd = noRetryCmd{redis.NewCmd(ctx, a...)}
		inFlight, v, err = s.do(ctx, cmd)
	}
	if !inFlight {
		// An autopipeliner still holding the command would write these
		// arguments later: leave them to the garbage collector then.
		clear(a)
		*ap = a[:0]
		cmdArgsPool.Put(ap)
	}
	return v, err
}

// apMinInFlight is how many of a store's commands may be in flight, the
// new one included, while WithAutoPipeline still sends them on the client
// directly; more go through the autopipeliner, as does a lone command
// under full duplex. Up to about 8 concurrent callers the plain client's
// connections keep the server as busy as one pipelined connection, so
// batching only pays beyond; docs/redis.md has the measurements.
const apMinInFlight = 16

// cmdArgsPool holds the argument slices of script commands.
var cmdArgsPool = sync.Pool{New: func() any { return new([]any) }}

// do sends cmd and waits for its reply, returning it with errors
// classified. Through an asynchronous autopipeliner the wait ends when ctx
// does: the command may still be sent after that, so inFlight is true and
// the error wraps ratelimit.ErrUnknownOutcome.
//
// Under WithAutoPipeline a command sent while at most apMinInFlight
// commands of the store are in flight (itself included) goes straight to
// the client, except a lone one under full duplex (see apMinInFlight).
func (s *Store) do(ctx context.Context, cmd noRetryCmd) (inFlight bool, v any, err error) {
	viaAP := s.ap != nil
	if s.apMin > 0 {
		if n := s.inFlight.Add(1); n <= s.apMin && (n > 1 || !s.apLone) {
			viaAP = false
		}
		defer s.inFlight.Add(-1)
	}
	if !viaAP {
		// base is the client given to New: the same as client unless
		// WithAutoPipeline replaced client by its autopipeliner.
		if err := s.base.Process(ctx, cmd); err != nil {
			return false, nil, classify(err)
		}
		v, err := cmd.Result()
		return false, v, classify(err)
	}
	if err := ctx.Err(); err != nil {
		// Nothing was queued.
		return false, nil, classify(err)
	}
	f := s.ap.Submit(ctx, cmd)
	if err := f.WaitContext(ctx); err != nil && ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return true, nil, fmt.Errorf("%w: redisstore: the context ended while the autopipeliner held the request, which may still run: %w", ratelimit.ErrUnknownOutcome, err)
	}
	v, err = cmd.Result()
	return false, v, classify(err)
}
