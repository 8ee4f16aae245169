//go:build race

package pgstore

// raceEnabled reports that the race detector is on: it slows every
// goroutine several times, so latency bounds mean nothing.
const raceEnabled = true
