package e2e

import (
	"testing"

	"github.com/sluicehq/sluice/conformance/e2e/testenv"
	"github.com/sluicehq/sluice/conformance/storetest"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// algorithms returns the algorithms every store is checked with: every
// in-repo algorithm.
func algorithms() []ratelimit.Algorithm { return storetest.DefaultAlgorithms() }

// privateHarness is the suite's harness for a server private to the test:
// every algorithm, stores from newStore, and store-down checks that stop
// and restart srv.
func privateHarness(srv *testenv.Server, newStore func(t *testing.T) ratelimit.Store) storetest.Harness {
	return storetest.Harness{
		Algorithms: algorithms(),
		Stop:       func(t *testing.T) { srv.Stop(t) },
		Start:      func(t *testing.T) { srv.Start(t) },
		NewStore:   newStore,
	}
}
