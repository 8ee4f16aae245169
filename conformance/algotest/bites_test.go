package algotest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/conformance/algotest"
	"github.com/sluicehq/sluice/conformance/internal/testalg"
)

// brokenEnv selects, in a child test binary, the flaw TestBrokenAlgorithm
// runs the suite on.
const brokenEnv = "ALGOTEST_BROKEN"

// TestBrokenAlgorithm runs the suite on a deliberately broken algorithm;
// it only runs as the child process of TestSuiteBites.
func TestBrokenAlgorithm(t *testing.T) {
	flaw := os.Getenv(brokenEnv)
	if flaw == "" {
		t.Skip("runs only as the child of TestSuiteBites")
	}
	algotest.Run(t, testalg.Broken{Flaw: testalg.Flaw(flaw)})
}

// TestSuiteBites proves that each deliberate flaw fails the subtest that
// names it.
func TestSuiteBites(t *testing.T) {
	if os.Getenv(brokenEnv) != "" {
		t.Skip("already the child")
	}
	for _, tc := range []struct {
		flaw    testalg.Flaw
		subtest string
	}{
		{testalg.EarlyRetry, "--- FAIL: TestBrokenAlgorithm/Contract"},
		{testalg.PeekWrites, "--- FAIL: TestBrokenAlgorithm/Contract"},
		{testalg.BackwardsMints, "--- FAIL: TestBrokenAlgorithm/ClockBackwards"},
		{testalg.PanicsOnGarbage, "--- FAIL: TestBrokenAlgorithm/Garbage"},
		{testalg.BurstPerPeriod, "--- FAIL: TestBrokenAlgorithm/Rate"},
		{testalg.PlainRefusal, "--- FAIL: TestBrokenAlgorithm/ValidateLimit"},
	} {
		t.Run(string(tc.flaw), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			// -rapid.nofailfile: the child must not leave reproducers in the tree.
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestBrokenAlgorithm$", "-test.v", "-rapid.nofailfile")
			cmd.Env = append(os.Environ(), brokenEnv+"="+string(tc.flaw))
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed an algorithm with the flaw %q", tc.flaw)
			}
			if !strings.Contains(string(out), tc.subtest) {
				lines := strings.Split(string(out), "\n")
				var fails []string
				for _, l := range lines {
					if strings.Contains(l, "--- FAIL") {
						fails = append(fails, l)
					}
				}
				t.Errorf("flaw %q: no %q in the suite's output; failures were:\n%s", tc.flaw, tc.subtest, strings.Join(fails, "\n"))
			}
		})
	}
}
