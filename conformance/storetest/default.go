package storetest

import "github.com/sluicehq/sluice/core/ratelimit"

// defaultAlgorithms is replaced by the algorithm catalog as soon as it
// exists; until then a Harness must list its algorithms.
func defaultAlgorithms() []ratelimit.Algorithm { return nil }
