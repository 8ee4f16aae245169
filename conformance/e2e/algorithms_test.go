package e2e

import (
	"github.com/sluicehq/sluice/conformance/storetest"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// algorithms returns the algorithms every store is checked with: every
// in-repo algorithm.
func algorithms() []ratelimit.Algorithm { return storetest.DefaultAlgorithms() }
