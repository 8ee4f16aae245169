// Package model holds simple, independent reference models of the
// algorithms for their tests: exact rational arithmetic with math/big, one
// step at a time, written for clarity rather than speed. It is used only
// by tests.
package model
