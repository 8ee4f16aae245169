package main

import (
	"net/http"
	"testing"

	"github.com/dunglas/httpsfv"
)

// fieldRules are three rules a request can meet at once; the plan's
// one request a year is spent by the first call.
const fieldRules = `
domain: fields
descriptors:
  - key: remote_address
    rate_limit: {unit: year, requests_per_unit: 100}
  - key: user
    rate_limit: {unit: year, requests_per_unit: 50}
  - key: plan
    rate_limit: {unit: year, requests_per_unit: 1}
`

// rateLimitItems parses a RateLimit or RateLimit-Policy field and returns
// its items' names and the value of param in each.
func rateLimitItems(t *testing.T, lines []string, param string) map[string]int64 {
	t.Helper()
	list, err := httpsfv.UnmarshalList(lines)
	if err != nil {
		t.Fatalf("%q: %v", lines, err)
	}
	out := map[string]int64{}
	for _, m := range list {
		it := m.(httpsfv.Item)
		v, _ := it.Params.Get(param)
		out[it.Value.(string)], _ = v.(int64)
	}
	return out
}

// TestRLSAndJSONFieldsOfEveryRule checks that the gRPC answer and the
// /json answer carry an item for each of the three rules in RateLimit
// and RateLimit-Policy, and Retry-After on a denial: /json once kept only
// the last of several header lines.
func TestRLSAndJSONFieldsOfEveryRule(t *testing.T) {
	srv := startServer(t, testConfig(t, fieldRules))
	c := rlsClient(t, srv)
	req := rlsReq("fields", rd("remote_address", "192.0.2.9"), rd("user", "ann"), rd("plan", "free"))
	resp, err := c.ShouldRateLimit(t.Context(), req)
	if err != nil || resp.GetOverallCode() != ok {
		t.Fatalf("first call: %v, %v", codesOf(resp), err)
	}
	hdr := headersOf(resp)
	if got := rateLimitItems(t, hdr.Values("RateLimit-Policy"), "q"); len(got) != 3 || got["fields.remote_address"] != 100 ||
		got["fields.user"] != 50 || got["fields.plan"] != 1 {
		t.Fatalf("RateLimit-Policy %q", hdr.Values("RateLimit-Policy"))
	}
	if got := rateLimitItems(t, hdr.Values("RateLimit"), "r"); len(got) != 3 || got["fields.remote_address"] != 99 ||
		got["fields.user"] != 49 || got["fields.plan"] != 0 {
		t.Fatalf("RateLimit %q", hdr.Values("RateLimit"))
	}

	// The plan is spent: /json is denied, with every rule's item (the
	// others' r unchanged: the denial took nothing) and Retry-After.
	rep, _ := postJSON(t, srv, `{"domain":"fields","descriptors":[
		{"entries":[{"key":"remote_address","value":"192.0.2.9"}]},
		{"entries":[{"key":"user","value":"ann"}]},
		{"entries":[{"key":"plan","value":"free"}]}]}`)
	if rep.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("/json status %d, want 429", rep.StatusCode)
	}
	if got := rateLimitItems(t, rep.Header.Values("RateLimit"), "r"); len(got) != 3 || got["fields.remote_address"] != 99 ||
		got["fields.user"] != 49 || got["fields.plan"] != 0 {
		t.Fatalf("/json RateLimit %q", rep.Header.Values("RateLimit"))
	}
	if len(rateLimitItems(t, rep.Header.Values("RateLimit-Policy"), "q")) != 3 {
		t.Fatalf("/json RateLimit-Policy %q", rep.Header.Values("RateLimit-Policy"))
	}
	if rep.Header.Get("Retry-After") == "" {
		t.Fatal("/json denial without Retry-After")
	}
}
