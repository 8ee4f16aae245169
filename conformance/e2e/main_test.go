package e2e

import (
	"os"
	"testing"

	"github.com/sluicehq/sluice/conformance/e2e/testenv"
)

// TestMain starts each server once for the whole binary, on first use, and
// removes them all when the tests end.
func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
