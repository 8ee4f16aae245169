package redisstore

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"

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
}

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:])}
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
func (s *Store) run(ctx context.Context, sc *script, keys []string, args []any) (any, error) {
	v, err := s.eval(ctx, "evalsha", sc.sha, keys, args)
	if isNoScript(err) {
		v, err = s.eval(ctx, "eval", sc.src, keys, args)
	}
	if err != nil {
		return nil, classify(err)
	}
	return v, nil
}

func (s *Store) eval(ctx context.Context, verb, body string, keys []string, args []any) (any, error) {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, verb, body, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	cmd := noRetryCmd{redis.NewCmd(ctx, a...)}
	if err := s.client.Process(ctx, cmd); err != nil {
		return nil, err
	}
	return cmd.Result()
}
