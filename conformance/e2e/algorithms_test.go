package e2e

import (
	"github.com/sluicehq/sluice/conformance/internal/testalg"
	"github.com/sluicehq/sluice/conformance/storetest"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// algorithms returns the algorithms every store is checked with: the
// suite's default set, or the suite's own test window until the catalog
// of in-repo algorithms exists.
func algorithms() []ratelimit.Algorithm {
	if all := storetest.DefaultAlgorithms(); len(all) > 0 {
		return all
	}
	return []ratelimit.Algorithm{testalg.Window{}}
}
