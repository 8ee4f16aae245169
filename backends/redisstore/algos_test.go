package redisstore_test

import (
	"github.com/sluicehq/sluice/algorithms/catalog"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// testAlgorithms returns the algorithms the store tests run with: the
// generic-path test algorithm and every in-repo algorithm.
func testAlgorithms() []ratelimit.Algorithm {
	return append([]ratelimit.Algorithm{windowAlg{}}, catalog.All()...)
}
