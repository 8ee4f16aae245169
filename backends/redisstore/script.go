package redisstore

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"sync"

	"github.com/redis/go-redis/v9"
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
// The command's arguments are built in a pooled slice, reused once
// Process has returned: keys travel as *string, which go-redis writes
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
	v, err := s.process(ctx, a)
	if isNoScript(err) {
		a[0], a[1] = "eval", sc.srcArg
		v, err = s.process(ctx, a)
	}
	clear(a)
	*ap = a[:0]
	cmdArgsPool.Put(ap)
	if err != nil {
		return nil, classify(err)
	}
	return v, nil
}

// cmdArgsPool holds the argument slices of script commands.
var cmdArgsPool = sync.Pool{New: func() any { return new([]any) }}

// process sends one no-retry command with arguments a.
func (s *Store) process(ctx context.Context, a []any) (any, error) {
	cmd := noRetryCmd{redis.NewCmd(ctx, a...)}
	if err := s.client.Process(ctx, cmd); err != nil {
		return nil, err
	}
	return cmd.Result()
}
