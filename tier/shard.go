package tier

import (
	"context"
	"strconv"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// subKey returns the key of sub-key i of key spread over n shards.
func subKey(key string, i, n int) string {
	return key + "\x00shard" + strconv.Itoa(i) + "/" + strconv.Itoa(n)
}

func (s *Store) applySharded(ctx context.Context, r *Rule, c ratelimit.Check) (ratelimit.Outcome, error) {
	return s.applyBacking(ctx, c, 0)
}
