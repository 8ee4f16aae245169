package redisstore

import (
	"context"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// nativeCovers reports whether every check has a native Lua program.
func nativeCovers(checks []ratelimit.Check) bool {
	return false
}

func (s *Store) applyNative(ctx context.Context, checks []ratelimit.Check, keys []string, out []ratelimit.Outcome) (bool, error) {
	return s.applyGeneric(ctx, checks, keys, out)
}
