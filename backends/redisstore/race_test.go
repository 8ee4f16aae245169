//go:build race

package redisstore_test

// raceEnabled reports that the race detector is on: it slows every
// goroutine several times, so latency bounds mean nothing.
const raceEnabled = true
