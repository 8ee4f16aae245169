//go:build !race

package redisstore_test

// raceEnabled reports that the race detector is on.
const raceEnabled = false
