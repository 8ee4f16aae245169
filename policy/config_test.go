package policy_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	sluice "github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// TestConfigErrors pins the exact error of every malformed input class.
func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"bad YAML", "domain: [x\n", `policy: bad.yaml:1: bad YAML: yaml: line 1: did not find expected ',' or ']'`},
		{"not a mapping", "- a\n", `policy: bad.yaml:1: want a mapping, have a list`},
		{"empty document", "", `policy: bad.yaml: empty document`},
		{"no domain", "descriptors: []\n", `policy: bad.yaml:1: domain: empty domain`},
		{"empty domain", "domain: \"\"\n", `policy: bad.yaml:1: domain: empty domain`},
		{"unknown top field", "domain: d\ndescriptor: []\n", `policy: bad.yaml:2: descriptor: unknown field`},
		{"duplicate field", "domain: d\ndomain: e\n", `policy: bad.yaml:2: domain: duplicate field`},
		{"unknown descriptor field", "domain: d\ndescriptors:\n  - key: k\n    rate: 5/minute\n", `policy: bad.yaml:4: descriptors[0].rate: unknown field`},
		{"unknown rate_limit field", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      burts: 2\n", `policy: bad.yaml:7: descriptors[0].rate_limit.burts: unknown field`},
		{"empty key", "domain: d\ndescriptors:\n  - value: v\n", `policy: bad.yaml:3: descriptors[0].key: empty key`},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n", `policy: bad.yaml:5: descriptors[0].rate_limit.unit: unit "fortnight" is not one of second, minute, hour, day, week, month, year`},
		{"bad short unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: 5/minutes\n", `policy: bad.yaml:4: descriptors[0].rate_limit.unit: unit "minutes" is not one of second, minute, hour, day, week, month, year`},
		{"bad short form", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: five a minute\n", `policy: bad.yaml:4: descriptors[0].rate_limit: want a rate such as 5/minute, have "five a minute"`},
		{"negative rate", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: -5/minute\n", `policy: bad.yaml:4: descriptors[0].rate_limit.requests_per_unit: negative requests_per_unit -5`},
		{"not an integer", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1.5\n", `policy: bad.yaml:6: descriptors[0].rate_limit.requests_per_unit: want an integer, have "1.5"`},
		{"negative burst", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      burst: -1\n", `policy: bad.yaml:7: descriptors[0].rate_limit.burst: negative burst -1`},
		{"burst too large", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: year\n      requests_per_unit: 1\n      burst: 1000\n", `policy: bad.yaml:7: descriptors[0].rate_limit.burst: 1/8760h0m0s burst 1000 under fixedwindow: ratelimit: invalid limit: refilling burst 1000 at 1 per 8760h0m0s takes longer than 876000h0m0s`},
		{"burst on deny", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 0\n      burst: 3\n", `policy: bad.yaml:7: descriptors[0].rate_limit.burst: a burst on a rule that denies everything (requests_per_unit 0)`},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: second\n", `policy: bad.yaml:5: descriptors[0].rate_limit.unlimited: an unlimited rate_limit sets no unit, requests_per_unit or burst`},
		{"not a bool", "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: yes please\n", `policy: bad.yaml:4: descriptors[0].shadow_mode: want true or false, have "yes please"`},
		{"duplicate key value", "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n", `policy: bad.yaml:5: descriptors[1]: duplicate descriptor key "k" value "v"`},
		{"duplicate key", "domain: d\ndescriptors:\n  - key: k\n  - key: k\n", `policy: bad.yaml:4: descriptors[1]: duplicate descriptor key "k"`},
		{"duplicate wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: a*\n  - key: k\n    value: a*\n", `policy: bad.yaml:5: descriptors[1]: duplicate descriptor key "k" value "a*"`},
		{"duplicate nested", "domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: j\n      - key: j\n", `policy: bad.yaml:6: descriptors[0].descriptors[1]: duplicate descriptor key "j"`},
		{"share_threshold without wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n", `policy: bad.yaml:5: descriptors[0].share_threshold: share_threshold needs a wildcard value (one with '*')`},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: a\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: a\n", `policy: bad.yaml:8: descriptors[0].replaces[0]: a rule cannot replace itself ("a")`},
		{"replaces nothing", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces: [ghost]\n", `policy: bad.yaml:7: descriptors[0].replaces[0]: replaces "ghost": no rule of domain "d" has that name`},
		{"empty replaces", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: \"\"\n", `policy: bad.yaml:7: descriptors[0].replaces[0]: empty name`},
		{"duplicate name", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: a, unit: second, requests_per_unit: 1}\n  - key: j\n    rate_limit: {name: a, unit: second, requests_per_unit: 1}\n", `policy: bad.yaml:6: descriptors[1].name: duplicate rule name "a" (also at bad.yaml:3)`},
		{"unknown algorithm", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: magic}\n", `policy: bad.yaml:4: descriptors[0].rate_limit.algorithm: unknown algorithm "magic"`},
		{"bad on_failure", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, on_failure: maybe}\n", `policy: bad.yaml:4: descriptors[0].rate_limit.on_failure: on_failure "maybe" is neither open nor closed`},
		{"bad budget", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, budget: soon}\n", `policy: bad.yaml:4: descriptors[0].rate_limit.budget: want a duration such as 5ms, have "soon"`},
		{"negative budget", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, budget: -1ms}\n", `policy: bad.yaml:4: descriptors[0].rate_limit.budget: negative budget -1ms`},
		{"plan changes algorithm", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      plans:\n        pro: {unit: second, requests_per_unit: 5, algorithm: gcra}\n", `policy: bad.yaml:8: descriptors[0].rate_limit.plans.pro.algorithm: unknown field`},
		{"plan bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      plans:\n        pro: 5/eon\n", `policy: bad.yaml:8: descriptors[0].rate_limit.plans.pro.unit: unit "eon" is not one of second, minute, hour, day, week, month, year`},
		{"plans on a plan level", "domain: d\ndescriptors:\n  - key: plan\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      plans:\n        pro: 5/second\n", `policy: bad.yaml:7: descriptors[0].rate_limit.plans: a level keyed "plan" cannot have plans`},
		{"no unit", "domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: j\n        rate_limit: {requests_per_unit: 3}\n", `policy: bad.yaml:6: descriptors[0].descriptors[0].rate_limit.unit: unit "" is not one of second, minute, hour, day, week, month, year`},
		{"window not whole nanoseconds", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 3, burst: 2}\n", `policy: bad.yaml:4: descriptors[0].rate_limit.burst: 3/1s burst 2 under fixedwindow: ratelimit: invalid limit: fixedwindow: the window Burst·Period/Count = 2·1s/3 is not a whole number of nanoseconds; choose Burst and Period so that Count divides Burst·Period (for example Burst 3)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := loadText(t, c.yaml)
			var ce *policy.ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, sluice.ErrInvalid) {
				t.Fatalf("error %v (%T), want a *ConfigError wrapping sluice.ErrInvalid", err, err)
			}
			if err.Error() != c.want {
				t.Errorf("error\n got %s\nwant %s", err, c.want)
			}
		})
	}
}

// loadText writes text to bad.yaml in a new directory and loads the file.
func loadText(t *testing.T, text string) (*policy.Set, error) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	return policy.Load("bad.yaml")
}

// TestGoValueErrors covers what YAML cannot express wrongly: Go values
// and domains across configs.
func TestGoValueErrors(t *testing.T) {
	rl := &policy.RateLimit{Unit: "second", RequestsPerUnit: 1}
	cases := []struct {
		name    string
		configs []policy.Config
		want    string
	}{
		{"duplicate domain", []policy.Config{{Domain: "d", File: "a.yaml", Line: 1}, {Domain: "d", File: "b.yaml", Line: 1}},
			`policy: b.yaml:1: domain: duplicate domain "d" (also in a.yaml)`},
		{"name without rate_limit", []policy.Config{{Domain: "d", Descriptors: []policy.DescriptorConfig{{Key: "k", Name: "a"}}}},
			`policy: config: descriptors[0].name: a name without rate_limit`},
		{"replaces without rate_limit", []policy.Config{{Domain: "d", Descriptors: []policy.DescriptorConfig{{Key: "k", Replaces: []string{"a"}}}}},
			`policy: config: descriptors[0].replaces: replaces without rate_limit`},
		{"derived name collides", []policy.Config{{Domain: "d", Descriptors: []policy.DescriptorConfig{{Key: "k", RateLimit: rl}, {Key: "j", Name: "d.k", RateLimit: rl}}}},
			`policy: config: descriptors[1].name: duplicate rule name "d.k" (also at domain "d" descriptors[0])`},
		{"replaces across domains", []policy.Config{
			{Domain: "d", Descriptors: []policy.DescriptorConfig{{Key: "k", Name: "a", RateLimit: rl}}},
			{Domain: "e", Descriptors: []policy.DescriptorConfig{{Key: "k", Replaces: []string{"a"}, RateLimit: rl}}}},
			`policy: config: descriptors[0].replaces[0]: replaces "a": no rule of domain "e" has that name`},
		{"plan changes on_failure", []policy.Config{{Domain: "d", Descriptors: []policy.DescriptorConfig{{Key: "k", RateLimit: &policy.RateLimit{Unit: "second", RequestsPerUnit: 1, Plans: map[string]policy.RateLimit{"pro": {OnFailure: "closed"}}}}}}},
			`policy: config: descriptors[0].rate_limit.plans.pro.on_failure: a plan cannot change the rule's on_failure`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := policy.NewSet(c.configs...)
			var ce *policy.ConfigError
			if !errors.As(err, &ce) || err.Error() != c.want {
				t.Fatalf("error\n got %v\nwant %s", err, c.want)
			}
		})
	}
}

func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: 1/second\n")
	write("b.yml", "domain: b\n")
	write("notes.txt", "not yaml: [")
	write(".hidden.yaml", "not yaml: [")
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	set, err := policy.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := set.Domains(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("domains %v, want [a b]", got)
	}
	if got := set.Rules(); len(got) != 1 || got[0] != "a.k" {
		t.Fatalf("rules %v, want [a.k]", got)
	}
	write("c.yaml", "domain: a\n")
	_, err = policy.Load(dir)
	want := `policy: ` + filepath.Join(dir, "c.yaml") + `:1: domain: duplicate domain "a" (also in ` + filepath.Join(dir, "a.yaml") + `)`
	if err == nil || err.Error() != want {
		t.Fatalf("duplicate domain across files: %v\nwant %s", err, want)
	}
	if _, err := policy.Load(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing path: %v", err)
	}
}
