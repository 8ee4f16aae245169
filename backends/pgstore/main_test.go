package pgstore

import (
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/pgtest"
)

// TestMain provides the PostgreSQL server the integration tests use (see
// pgtest.Main).
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, "pgstore")) }
