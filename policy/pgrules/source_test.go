package pgrules

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/policy"
)

// TestLoadDecides loads the seeds' kinds of rules from the table and
// decides them on the memory store.
func TestLoadDecides(t *testing.T) {
	t.Parallel()
	f := newFixture(t, pgtest.DSN(t))
	cols := "descriptor, requests_per_unit, unit"
	f.insert(t, cols, `[{"key":"remote_address"}]`, 3, "minute")                                  // per IP
	f.insert(t, cols+", is_active", `[{"key":"remote_address"}]`, 100, "minute", false)           // inactive: ignored
	f.insert(t, "descriptor, unlimited", `[{"key":"remote_address","value":"10.0.0.1"}]`, true)   // a VIP address
	f.insert(t, cols, `[{"key":"user"},{"key":"path","value":"/login"}]`, 2, "minute")            // per user+endpoint
	f.insert(t, cols+", algorithm", `[{"key":"api_key"}]`, 2, "hour", "tokenbucket")              // every plan …
	f.insert(t, cols+", algorithm, plan", `[{"key":"api_key"}]`, 4, "hour", "tokenbucket", "pro") // … but pro
	f.insert(t, cols+", plan", `[{"key":"team"}]`, 1, "day", "free")                              // only free
	f.insert(t, cols+", shadow_mode", `[{"key":"tenant"}]`, 1, "minute", true)                    // shadow
	f.insert(t, cols+", name", `[{"key":"global","value":"all"}]`, 1000, "second", "global")      // global

	src := f.source(t)
	e := f.engine(t, src)
	for _, c := range []struct {
		d    policy.Descriptor
		n    int
		want int
	}{
		{desc("remote_address", "1.2.3.4"), 5, 3},
		{desc("remote_address", "5.6.7.8"), 5, 3},
		{desc("remote_address", "10.0.0.1"), 5, 5},
		{desc("user", "alice", "path", "/login"), 5, 2},
		{desc("user", "alice", "path", "/other"), 5, 5}, // no rule
		{desc("api_key", "k1"), 5, 2},
		{desc("api_key", "k2", "plan", "pro"), 5, 4},
		{desc("api_key", "k3", "plan", "enterprise"), 5, 2}, // no variant: the plan NULL row
		{desc("team", "t1", "plan", "free"), 3, 1},
		{desc("team", "t2", "plan", "pro"), 3, 3}, // no NULL row: not limited
		{desc("team", "t3"), 3, 3},
		{desc("tenant", "acme"), 3, 3}, // shadow: decides, never denies
		{desc("global", "all"), 5, 5},
	} {
		if got := admitted(t, e, f.domain, c.d, c.n); got != c.want {
			t.Errorf("%v: %d of %d admitted, want %d", c.d, got, c.n, c.want)
		}
	}
	res, err := e.Decide(t.Context(), f.domain, []policy.Descriptor{desc("tenant", "acme")}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if st := res.Statuses[0]; !res.Allowed || !st.Shadow || st.Decision.Allowed {
		t.Errorf("shadow rule over its limit: Allowed=%t, status %+v; want allowed, shadow, decision denied", res.Allowed, st)
	}
	res, err = e.Decide(t.Context(), f.domain, []policy.Descriptor{desc("global", "all")}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Statuses[0].Decision.Rule; got != "global" {
		t.Errorf("the named rule decided as %q, want its name %q", got, "global")
	}
}

// TestLoadReplaces: a rule switches off another one it names.
func TestLoadReplaces(t *testing.T) {
	t.Parallel()
	f := newFixture(t, pgtest.DSN(t))
	cols := "descriptor, requests_per_unit, unit, name"
	f.insert(t, cols, `[{"key":"remote_address"}]`, 1, "minute", "per_ip")
	f.insert(t, cols+", replaces", `[{"key":"user","value":"vip"}]`, 3, "minute", "vip", []string{"per_ip"})
	e := f.engine(t, f.source(t))
	both := []policy.Descriptor{desc("remote_address", "9.9.9.9"), desc("user", "vip")}
	ok := 0
	for range 5 {
		res, err := e.Decide(t.Context(), f.domain, both, 1)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			ok++
		}
	}
	if ok != 3 {
		t.Fatalf("per_ip (1/minute) replaced by vip (3/minute): %d of 5 admitted, want 3", ok)
	}
}

// TestLoadRefusesBadRows: every class of bad row is refused with the
// table, the row's id and the column.
func TestLoadRefusesBadRows(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	cols := "descriptor, requests_per_unit, unit"
	for _, c := range []struct {
		name string
		// rows inserts the rows and returns the id the error names; an
		// earlier row a message refers to is that id - 1.
		rows   func(t *testing.T, f *fixture) int64
		column string
		msg    string // the error after "column: ", with %d for a row id
	}{
		{name: "unknown descriptor field", rows: func(t *testing.T, f *fixture) int64 {
			return f.insert(t, cols, `[{"key":"user","val":"x"}]`, 1, "minute")
		}, column: "descriptor", msg: `want a JSON array of {"key": …, "value": …}: json: unknown field "val"`},
		{name: "empty descriptor key", rows: func(t *testing.T, f *fixture) int64 {
			return f.insert(t, cols, `[{"key":""}]`, 1, "minute")
		}, column: "descriptor", msg: "empty key"},
		{name: "bad unit", rows: func(t *testing.T, f *fixture) int64 {
			return f.insert(t, cols, `[{"key":"user"}]`, 1, "fortnight")
		}, column: "unit", msg: `unit "fortnight" is not one of second, minute, hour, day, week, month, year`},
		{name: "rate without unit", rows: func(t *testing.T, f *fixture) int64 {
			return f.insert(t, "descriptor, requests_per_unit", `[{"key":"user"}]`, 5)
		}, column: "unit", msg: `unit "" is not one of second, minute, hour, day, week, month, year`},
		{name: "unlimited with a rate", rows: func(t *testing.T, f *fixture) int64 {
			return f.insert(t, cols+", unlimited", `[{"key":"user"}]`, 5, "minute", true)
		}, column: "unlimited", msg: "an unlimited rate_limit sets no unit, requests_per_unit or burst"},
		{name: "burst on a deny rule", rows: func(t *testing.T, f *fixture) int64 {
			return f.insert(t, cols+", burst", `[{"key":"user"}]`, 0, "minute", 5)
		}, column: "burst", msg: "a burst on a rule that denies everything (requests_per_unit 0)"},
		{name: "unknown algorithm", rows: func(t *testing.T, f *fixture) int64 {
			return f.insert(t, cols+", algorithm", `[{"key":"user"}]`, 1, "minute", "magic")
		}, column: "algorithm", msg: `unknown algorithm "magic"`},
		{name: "replaces itself", rows: func(t *testing.T, f *fixture) int64 {
			return f.insert(t, cols+", name, replaces", `[{"key":"user"}]`, 1, "minute", "a", []string{"a"})
		}, column: "replaces", msg: `a rule cannot replace itself ("a")`},
		{name: "replaces an unknown rule", rows: func(t *testing.T, f *fixture) int64 {
			return f.insert(t, cols+", name, replaces", `[{"key":"user"}]`, 1, "minute", "a", []string{"b"})
		}, column: "replaces", msg: `replaces "b": no rule of domain "%s" has that name`},
		{name: "duplicate descriptor", rows: func(t *testing.T, f *fixture) int64 {
			f.insert(t, cols, `[{"key":"user"}]`, 1, "minute")
			return f.insert(t, cols, `[{"key":"user"}]`, 2, "minute")
		}, column: "descriptor", msg: "row %d already has this descriptor with plan NULL"},
		{name: "duplicate plan", rows: func(t *testing.T, f *fixture) int64 {
			f.insert(t, cols+", plan", `[{"key":"user"}]`, 1, "minute", "pro")
			return f.insert(t, cols+", plan", `[{"key":"user"}]`, 2, "minute", "pro")
		}, column: "plan", msg: `row %d already has this descriptor with plan "pro"`},
		{name: "empty plan", rows: func(t *testing.T, f *fixture) int64 {
			return f.insert(t, cols+", plan", `[{"key":"user"}]`, 1, "minute", "")
		}, column: "plan", msg: "empty; NULL means every plan"},
		{name: "plan row changes the algorithm", rows: func(t *testing.T, f *fixture) int64 {
			f.insert(t, cols+", algorithm", `[{"key":"user"}]`, 1, "minute", "gcra")
			return f.insert(t, cols+", algorithm, plan", `[{"key":"user"}]`, 2, "minute", "tokenbucket", "pro")
		}, column: "algorithm", msg: "differs from row %d of the same descriptor: the column belongs to the rule, not to a plan variant"},
		{name: "bad unit in a plan row", rows: func(t *testing.T, f *fixture) int64 {
			f.insert(t, cols, `[{"key":"user"}]`, 1, "minute")
			return f.insert(t, cols+", plan", `[{"key":"user"}]`, 2, "eon", "pro")
		}, column: "unit", msg: `unit "eon" is not one of second, minute, hour, day, week, month, year`},
		{name: "budget in months", rows: func(t *testing.T, f *fixture) int64 {
			return f.insert(t, cols+", budget", `[{"key":"user"}]`, 1, "minute", "1 month")
		}, column: "budget", msg: "months in a budget; use seconds or milliseconds"},
		{name: "negative budget", rows: func(t *testing.T, f *fixture) int64 {
			return f.insert(t, cols+", budget", `[{"key":"user"}]`, 1, "minute", "-1 second")
		}, column: "budget", msg: "negative budget -1s"},
		{name: "duplicate rule name", rows: func(t *testing.T, f *fixture) int64 {
			f.insert(t, cols+", name", `[{"key":"user"}]`, 1, "minute", "n")
			return f.insert(t, cols+", name", `[{"key":"path"}]`, 1, "minute", "n")
		}, column: "name", msg: `duplicate rule name "n" (also at table RateLimitRule:%d)`},
		{name: "rule name used in two domains", rows: func(t *testing.T, f *fixture) int64 {
			f.insert(t, "domain, "+cols+", name", f.domain+"_a", `[{"key":"user"}]`, 1, "minute", "n")
			return f.insert(t, "domain, "+cols+", name", f.domain+"_b", `[{"key":"user"}]`, 1, "minute", "n")
		}, column: "name", msg: `duplicate rule name "n" (also at table RateLimitRule:%d)`},
		{name: "share_threshold without wildcard", rows: func(t *testing.T, f *fixture) int64 {
			return f.insert(t, cols+", share_threshold", `[{"key":"path","value":"/a"}]`, 1, "minute", true)
		}, column: "share_threshold", msg: "share_threshold needs a wildcard value (one with '*')"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, dsn)
			id := c.rows(t, f)
			_, err := f.source(t).Load(t.Context())
			var ce *policy.ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, sluice.ErrInvalid) {
				t.Fatalf("Load: %v, want a *policy.ConfigError matching sluice.ErrInvalid", err)
			}
			msg := c.msg
			switch c.name {
			case "duplicate descriptor", "duplicate plan", "plan row changes the algorithm", "duplicate rule name",
				"rule name used in two domains":
				msg = fmt.Sprintf(msg, id-1)
			case "replaces an unknown rule":
				msg = fmt.Sprintf(msg, f.domain)
			}
			want := fmt.Sprintf("policy: table RateLimitRule:%d: %s: %s", id, c.column, msg)
			if err.Error() != want || ce.File != ErrorFile || ce.Line != int(id) || ce.Field != c.column {
				t.Fatalf("Load error:\n got %v (File %q, Line %d, Field %q)\nwant %s", err, ce.File, ce.Line, ce.Field, want)
			}
		})
	}
}
