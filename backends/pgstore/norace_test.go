//go:build !race

package pgstore

// raceEnabled reports that the race detector is on.
const raceEnabled = false
