package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", messagingRules)
	var out, errOut strings.Builder
	if code := run(t.Context(), []string{"validate", "-rules", good}, func(string) string { return "" }, &out, &errOut); code != exitOK {
		t.Fatalf("good rules: exit %d: %s %s", code, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "messaging") {
		t.Fatalf("output %q does not name the domain", out.String())
	}
	bad := t.TempDir()
	for name, text := range map[string]string{
		"unit.yaml":   "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n",
		"yaml.yml":    "domain: b\ndescriptors: [\n",
		"field.yaml":  "domain: c\ndescriptors:\n  - key: k\n    rate_limt: {unit: second, requests_per_unit: 1}\n",
		"dup.yaml":    messagingRules,
		"ignored.txt": "not rules",
	} {
		if err := os.WriteFile(filepath.Join(bad, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out.Reset()
	// Environment variables set flags too.
	env := func(k string) string {
		if k == "SLUICE_RULES" {
			return bad
		}
		return ""
	}
	code := run(t.Context(), []string{"validate"}, env, &out, &errOut)
	if code != exitInvalidConfig {
		t.Fatalf("bad rules: exit %d, want %d: %s", code, exitInvalidConfig, out.String())
	}
	got := out.String()
	for _, want := range []string{
		filepath.Join(bad, "unit.yaml") + ":5: descriptors[0].rate_limit.unit:",
		filepath.Join(bad, "yaml.yml") + ":",
		filepath.Join(bad, "field.yaml") + ":4: descriptors[0].rate_limt",
		"3 error(s)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	// A domain in two files is an error of the whole set.
	out.Reset()
	code = run(t.Context(), []string{"validate", good, filepath.Join(bad, "dup.yaml")}, func(string) string { return "" }, &out, &errOut)
	if code != exitInvalidConfig || !strings.Contains(out.String(), "duplicate domain") {
		t.Fatalf("duplicate domain: exit %d: %s", code, out.String())
	}
}

func TestUsageAndExitCodes(t *testing.T) {
	env := func(string) string { return "" }
	var out, errOut strings.Builder
	for _, tc := range []struct {
		args []string
		env  func(string) string
		want int
	}{
		{nil, env, exitUsage},
		{[]string{"nope"}, env, exitUsage},
		{[]string{"help"}, env, exitOK},
		{[]string{"serve", "-h"}, env, exitOK},
		{[]string{"serve", "-bogus"}, env, exitUsage},
		{[]string{"serve"}, env, exitUsage}, // no -rules
		{[]string{"serve", "-rules", "x"}, func(k string) string {
			if k == "SLUICE_MAX_HITS" {
				return "lots"
			}
			return ""
		}, exitUsage},
		{[]string{"serve", "-rules", "/nonexistent", "-grpc-addr", "127.0.0.1:0", "-http-addr", ""}, env, exitInvalidConfig},
		{[]string{"validate", "-h"}, env, exitOK},
		{[]string{"loadtest", "-h"}, env, exitOK},
	} {
		if got := run(t.Context(), tc.args, tc.env, &out, &errOut); got != tc.want {
			t.Errorf("sluice %v: exit %d, want %d", tc.args, got, tc.want)
		}
	}
	errOut.Reset()
	run(t.Context(), []string{"serve", "-h"}, env, &out, &errOut)
	for _, want := range []string{"-grpc-addr", "SLUICE_GRPC_ADDR", "-backend", "SLUICE_TLS_CLIENT_CA"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("serve -h lacks %q", want)
		}
	}
}
