//go:build !race

package e2e

// tierRaceEnabled reports that the race detector is on.
const tierRaceEnabled = false
