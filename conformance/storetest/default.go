package storetest

import (
	"github.com/sluicehq/sluice/algorithms/catalog"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// defaultAlgorithms is every in-repo algorithm.
func defaultAlgorithms() []ratelimit.Algorithm { return catalog.All() }
