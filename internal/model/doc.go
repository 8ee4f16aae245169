// Package model holds simple, independent reference models of the in-repo
// algorithms: exact rational arithmetic with math/big, one step at a time,
// written for clarity rather than speed. They are the one set of models:
// the algorithms' tests use them directly and the conformance module
// presents them as package conformance/models. It is used only by tests.
package model
