// Package catalog lists every algorithm in this module, for stores that
// select a native program by name, for configuration that names an
// algorithm, and for test suites that run on all of them.
package catalog
