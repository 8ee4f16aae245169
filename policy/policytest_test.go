package policy_test

import (
	"testing"

	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/policy/policytest"
)

// TestMemoryStore runs the store-independent policy scenarios on the
// memory store; conformance/e2e runs them on Redis and PostgreSQL.
func TestMemoryStore(t *testing.T) {
	policytest.Run(t, func(t *testing.T) ratelimit.Store {
		st, err := memstore.New()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	})
}
