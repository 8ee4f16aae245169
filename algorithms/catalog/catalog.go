package catalog

import (
	"github.com/sluicehq/sluice/algorithms/fixedwindow"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/algorithms/leakybucket"
	"github.com/sluicehq/sluice/algorithms/slidinglog"
	"github.com/sluicehq/sluice/algorithms/slidingwindow"
	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// All returns every in-repo algorithm, a new slice on each call, in a
// fixed order. It is safe for concurrent use.
func All() []ratelimit.Algorithm {
	return []ratelimit.Algorithm{
		tokenbucket.New(),
		gcra.New(),
		leakybucket.New(),
		fixedwindow.New(),
		slidingwindow.New(),
		slidinglog.New(),
	}
}

// ByName returns the in-repo algorithm whose Name is name, and whether
// there is one. It is safe for concurrent use.
func ByName(name string) (ratelimit.Algorithm, bool) {
	for _, a := range All() {
		if a.Name() == name {
			return a, true
		}
	}
	return nil, false
}
