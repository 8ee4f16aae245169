//go:build race

package cluster

// raceEnabled reports that the race detector is on: it slows every
// goroutine several times, so timing measurements mean nothing.
const raceEnabled = true
