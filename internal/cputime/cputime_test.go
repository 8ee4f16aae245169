package cputime

import (
	"runtime"
	"testing"
)

func TestProcessGrowsWithWork(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("no getrusage on " + runtime.GOOS)
	}
	start := Process()
	if start <= 0 {
		t.Fatalf("Process() = %v at start, want > 0", start)
	}
	sum := 0
	for end := start; end == start; end = Process() {
		for i := range 1_000_000 {
			sum += i
		}
	}
	if got := Process(); got <= start {
		t.Fatalf("Process() = %v after work, want > %v (sum %d)", got, start, sum)
	}
}
