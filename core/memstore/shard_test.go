package memstore

import (
	"fmt"
	"testing"
)

// TestShardOfSpreadsKeys checks that shardOf spreads typical keys of
// every length class (the mix up to 8 bytes, up to 16, maphash beyond)
// evenly over the shards: each gets within 25% of its share.
func TestShardOfSpreadsKeys(t *testing.T) {
	m, err := New()
	if err != nil {
		t.Fatal(err)
	}
	const n = 64_000
	for _, shape := range []string{"%d", "u:%05d", "user:%07d", "10.0.%d.%d", "tenant-42/user-%08d/api/v1/orders"} {
		var counts [memShards]int
		for i := range n {
			var key string
			if shape == "10.0.%d.%d" {
				key = fmt.Sprintf(shape, i/256, i%256)
			} else {
				key = fmt.Sprintf(shape, i)
			}
			counts[m.shardOf(key)]++
		}
		for sh, c := range counts {
			if share := n / memShards; c < share*3/4 || c > share*5/4 {
				t.Errorf("keys %q: shard %d holds %d, want within 25%% of %d", shape, sh, c, share)
			}
		}
	}
}
