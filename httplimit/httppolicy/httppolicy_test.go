package httppolicy_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/dunglas/httpsfv"
	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/httplimit/httppolicy"
	"github.com/sluicehq/sluice/policy"
)

// privateStore is a memory store of the test's own, so that reruns
// (-count) start from full buckets.
func privateStore(t *testing.T) *memstore.Store {
	t.Helper()
	st, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// TestPolicyMiddleware runs the middleware over a policy engine on a real
// server: a per-IP rule, a per-API-key rule in shadow mode, and a path
// that no one may call.
func TestPolicyMiddleware(t *testing.T) {
	set, err := policy.NewSet(policy.Config{Domain: "api", Descriptors: []policy.DescriptorConfig{
		{Key: "remote_address", Name: "per-ip", RateLimit: &policy.RateLimit{Unit: "minute", RequestsPerUnit: 2, Algorithm: "gcra"}},
		{Key: "api_key", Name: "per-key", ShadowMode: true, RateLimit: &policy.RateLimit{Unit: "minute", RequestsPerUnit: 1, Algorithm: "gcra"}},
		{Key: "path", Value: "/admin", Name: "no-admin", RateLimit: &policy.RateLimit{Unit: "second", RequestsPerUnit: 0}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	engine, err := policy.New(set, policy.WithStore(privateStore(t)))
	if err != nil {
		t.Fatal(err)
	}
	path := func(r *http.Request) (string, error) { return r.URL.Path, nil }
	d := httppolicy.Decider(engine, "api",
		httppolicy.Descriptor{{Key: "remote_address", Value: httplimit.ClientIP()}},
		httppolicy.Descriptor{{Key: "api_key", Value: httplimit.Header("X-Api-Key")}},
		httppolicy.Descriptor{{Key: "path", Value: path}})
	srv := httptest.NewServer(httplimit.Middleware(d)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})))
	defer srv.Close()

	call := func(p string, key string) (int, http.Header, httpsfv.List, httplimit.Problem) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+p, nil)
		if key != "" {
			req.Header.Set("X-Api-Key", key)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var list httpsfv.List
		if lines := resp.Header.Values("RateLimit"); len(lines) > 0 {
			if list, err = httpsfv.UnmarshalList(lines); err != nil {
				t.Fatalf("RateLimit %q: %v", lines, err)
			}
		}
		if lines := resp.Header.Values("RateLimit-Policy"); len(lines) > 0 {
			if _, err := httpsfv.UnmarshalList(lines); err != nil {
				t.Fatalf("RateLimit-Policy %q: %v", lines, err)
			}
		}
		var prob httplimit.Problem
		if resp.Header.Get("Content-Type") == "application/problem+json" {
			_ = json.NewDecoder(resp.Body).Decode(&prob)
		}
		return resp.StatusCode, resp.Header, list, prob
	}
	names := func(l httpsfv.List) map[string]bool {
		out := map[string]bool{}
		for _, m := range l {
			out[m.(httpsfv.Item).Value.(string)] = true
		}
		return out
	}

	// No API key: that descriptor is left out; only per-ip applies.
	code, _, list, _ := call("/a", "")
	if code != http.StatusOK || !names(list)["per-ip"] || names(list)["per-key"] {
		t.Fatalf("status %d, RateLimit items %v", code, names(list))
	}
	// With a key, the shadow rule reports too; its denial on the next call
	// does not refuse.
	if code, _, list, _ = call("/a", "k"); code != http.StatusOK || !names(list)["per-key"] {
		t.Fatalf("status %d, RateLimit items %v", code, names(list))
	}
	// per-ip is spent: 429 naming it, not the shadow rule.
	code, hdr, _, prob := call("/a", "k")
	if code != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" {
		t.Fatalf("status %d, Retry-After %q", code, hdr.Get("Retry-After"))
	}
	if len(prob.ViolatedPolicies) != 1 || prob.ViolatedPolicies[0] != "per-ip" {
		t.Errorf("violated-policies %v, want [per-ip]", prob.ViolatedPolicies)
	}
}

func TestPolicyBlockedPathIsForbidden(t *testing.T) {
	set, err := policy.NewSet(policy.Config{Domain: "api", Descriptors: []policy.DescriptorConfig{
		{Key: "path", Value: "/admin", Name: "no-admin", RateLimit: &policy.RateLimit{Unit: "second", RequestsPerUnit: 0}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	engine, err := policy.New(set, policy.WithStore(privateStore(t)))
	if err != nil {
		t.Fatal(err)
	}
	path := func(r *http.Request) (string, error) { return r.URL.Path, nil }
	h := httplimit.Middleware(httppolicy.Decider(engine, "api", httppolicy.Descriptor{{Key: "path", Value: path}}))(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for p, want := range map[string]int{"/admin": 403, "/other": 200} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, p, nil))
		if w.Code != want {
			t.Errorf("%s: status %d, want %d", p, w.Code, want)
		}
		if w.Header().Get("Retry-After") != "" {
			t.Errorf("%s: Retry-After %q", p, w.Header().Get("Retry-After"))
		}
	}
}
