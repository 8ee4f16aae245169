package algotest_test

import (
	"testing"

	"github.com/sluicehq/sluice/algorithms/catalog"
	"github.com/sluicehq/sluice/conformance/algotest"
	"github.com/sluicehq/sluice/conformance/internal/testalg"
	"github.com/sluicehq/sluice/conformance/models"
)

// TestCatalog runs the suite on every in-repo algorithm with its model.
func TestCatalog(t *testing.T) {
	for _, alg := range catalog.All() {
		t.Run(alg.Name(), func(t *testing.T) {
			var opts []algotest.Option
			if alg.Name() == "slidingwindow" {
				opts = append(opts, algotest.WithUnderAdmission())
			}
			if m, ok := models.For(alg.Name()); ok {
				opts = append(opts, algotest.WithModel(m))
			} else {
				t.Errorf("no model for the in-repo algorithm %q: add one to package models", alg.Name())
			}
			algotest.Run(t, alg, opts...)
		})
	}
}

// TestInternalWindow runs the suite on the conformance module's own test
// algorithm, which storetest's tests use.
func TestInternalWindow(t *testing.T) {
	algotest.Run(t, testalg.Window{})
}
