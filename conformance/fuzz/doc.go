// Package fuzz holds the conformance module's fuzz targets, run briefly
// by .ci/run and at length by hand:
//
//	go test -run='^$' -fuzz='^FuzzMemoryKeys$' -fuzztime=1m github.com/sluicehq/sluice/conformance/fuzz
//
// FuzzMemoryKeys feeds arbitrary namespaces and keys through the memory
// store and checks that they are refused with ErrInvalidKey exactly when
// their length is out of range, and otherwise stored verbatim and isolated
// from every neighbouring key. FuzzDifferential runs one arbitrary
// sequence of takes and clock moves on the memory store and on the
// reference models of package models, and requires the same decisions.
//
// The package has no non-test code.
package fuzz
