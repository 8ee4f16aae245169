package e2e

import (
	"testing"

	"github.com/sluicehq/sluice/conformance/storetest"
	"github.com/sluicehq/sluice/core/memstore"
)

// TestMemoryStore runs the conformance suite on the embedded store, read
// through the wall clock like a server-backed store.
func TestMemoryStore(t *testing.T) {
	mem, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	storetest.Run(t, storetest.Harness{NewStore: storetest.Shared(mem), Algorithms: algorithms()})
}
