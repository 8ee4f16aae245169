package sluice_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/fakeclock"
)

// decideSelected calls DecideSelected with room for every decision.
func decideSelected(ctx context.Context, c *sluice.Composite, n int64, sel []sluice.Selection) ([]sluice.Decision, error) {
	ds := make([]sluice.Decision, len(sel))
	err := c.DecideSelected(ctx, n, sel, ds)
	return ds, err
}

func TestCompositeDecideSelectedSubsetAtomic(t *testing.T) {
	clk := fakeclock.New()
	rules := []sluice.Rule{
		{Name: "ip", Algorithm: gcra.New(), Limit: sluice.PerHour(5)},
		{Name: "user", Algorithm: gcra.New(), Limit: sluice.PerHour(3)},
		{Name: "global", Algorithm: gcra.New(), Limit: sluice.PerHour(100)},
	}
	c, err := sluice.NewComposite(rules, sluice.WithStore(clockedStore(t, clk)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	anonymous := []sluice.Selection{{Rule: 0, Key: "1.2.3.4"}, {Rule: 2, Key: "all"}}
	for i := range 5 {
		ds, err := decideSelected(ctx, c, 1, anonymous)
		if err != nil || len(ds) != 2 || !ds[0].Allowed || ds[0].Rule != "ip" || ds[1].Rule != "global" {
			t.Fatalf("anonymous call %d: %+v %v", i, ds, err)
		}
	}
	ds, err := decideSelected(ctx, c, 1, anonymous)
	if err != nil || ds[0].Allowed {
		t.Fatalf("6th anonymous call: %+v %v, want denied by ip", ds, err)
	}
	// The denial took nothing from global: 95 left.
	ds, err = decideSelected(ctx, c, 0, []sluice.Selection{{Rule: 2, Key: "all"}})
	if err != nil || ds[0].Remaining != 95 {
		t.Fatalf("global after a denial: %+v %v, want 95 left", ds, err)
	}
	// A per-call limit keeps the rule's bucket: user took 2 of 3/hour,
	// 40 minutes of GCRA debt, which under 10/hour leaves 3.
	if _, err := decideSelected(ctx, c, 2, []sluice.Selection{{Rule: 1, Key: "alice"}}); err != nil {
		t.Fatal(err)
	}
	ds, err = decideSelected(ctx, c, 0, []sluice.Selection{{Rule: 1, Key: "alice", Limit: sluice.PerHour(10)}})
	if err != nil || ds[0].Remaining != 3 || ds[0].Limit != sluice.PerHour(10) {
		t.Fatalf("plan limit: %+v %v, want 3 left under 10/hour", ds, err)
	}
	for _, bad := range [][]sluice.Selection{nil, {{Rule: 3, Key: "k"}}, {{Rule: -1, Key: "k"}}, {{Rule: 0, Key: "k", Limit: sluice.Limit{Count: -1}}}} {
		if _, err := decideSelected(ctx, c, 1, bad); !errors.Is(err, sluice.ErrInvalid) {
			t.Errorf("DecideSelected(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
	if err := c.DecideSelected(ctx, 1, anonymous, make([]sluice.Decision, 1)); !errors.Is(err, sluice.ErrInvalid) {
		t.Errorf("DecideSelected with room for 1 of 2 decisions = %v, want ErrInvalid", err)
	}
}

func TestCompositeWithRulesKeepsBucketsAndConverts(t *testing.T) {
	clk := fakeclock.New()
	c, err := sluice.NewComposite([]sluice.Rule{
		{Name: "a", Algorithm: gcra.New(), Limit: sluice.PerHour(10)},
		{Name: "b", Algorithm: gcra.New(), Limit: sluice.PerHour(10)},
	}, sluice.WithStore(clockedStore(t, clk)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := c.AllowN(ctx, 7, "k", "k"); err != nil {
		t.Fatal(err)
	}
	next, err := c.WithRules([]sluice.Rule{
		{Name: "c", Algorithm: gcra.New(), Limit: sluice.PerHour(1)},
		{Name: "b", Algorithm: tokenbucket.New(), Limit: sluice.PerHour(10)},
		{Name: "a", Algorithm: gcra.New(), Limit: sluice.PerHour(20)},
	})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := next.Decide(ctx, 0, "k", "k", "k")
	if err != nil || ds[0].Remaining != 1 || ds[1].Remaining != 3 || ds[2].Remaining != 6 {
		t.Fatalf("after WithRules: %+v %v; want c new (1), b converted (3), a keeps its 42 minutes of debt under 20/hour (6)", ds, err)
	}
	if ds, err := c.Decide(ctx, 0, "k", "k"); err != nil || ds[0].Remaining != 3 {
		t.Fatalf("the old composite: %+v %v, want unchanged and usable", ds, err)
	}
	if _, err := c.WithRules(nil); !errors.Is(err, ratelimit.ErrInvalidRule) {
		t.Fatalf("no rules: %v", err)
	}
	if _, err := c.WithRules([]sluice.Rule{{Name: "a", Algorithm: gcra.New(), Limit: sluice.PerHour(1)}, {Name: "a", Algorithm: gcra.New(), Limit: sluice.PerHour(1)}}); !errors.Is(err, ratelimit.ErrInvalidRule) {
		t.Fatalf("duplicate names: %v", err)
	}
}
