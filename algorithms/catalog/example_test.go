package catalog_test

import (
	"fmt"

	"github.com/sluicehq/sluice/algorithms/catalog"
)

func ExampleByName() {
	alg, ok := catalog.ByName("gcra")
	fmt.Println(alg.Name(), ok)
	// Output: gcra true
}
