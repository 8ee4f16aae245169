//go:build race

package e2e

// tierRaceEnabled reports that the race detector is on: it slows every
// goroutine several times, so the tier's timing measurements (drift,
// per-call budgets, the sharded cluster's count) mean nothing.
const tierRaceEnabled = true
