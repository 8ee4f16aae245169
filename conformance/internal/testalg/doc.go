// Package testalg holds small, exact algorithms the conformance module uses
// to test its own suites before, and independently of, the algorithms
// module: a correct fixed window and deliberately broken variants that the
// suites must reject.
//
// They are test fixtures, not production algorithms: the module is internal
// so nothing outside conformance can depend on them.
package testalg
