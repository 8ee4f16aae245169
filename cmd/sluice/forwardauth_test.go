package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
)

const gatewayRules = `
domain: gateway
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: method
    value: DELETE
    descriptors:
      - key: path
        value: /admin/*
        rate_limit: {unit: minute, requests_per_unit: 1}
`

func TestParseDescriptorTemplate(t *testing.T) {
	got, err := parseDescriptorTemplate(" remote_address ; method,path;header:X-Api-Key=api_key;host")
	if err != nil {
		t.Fatal(err)
	}
	want := [][]entrySource{
		{{kind: sourceRemoteAddress, key: "remote_address"}},
		{{kind: sourceMethod, key: "method"}, {kind: sourcePath, key: "path"}},
		{{kind: sourceHeader, key: "api_key", header: "X-Api-Key"}},
		{{kind: sourceHost, key: "host"}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for _, bad := range []string{"", ";", "cookie", "header:", "path=", "remote_address,nope"} {
		if _, err := parseDescriptorTemplate(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestForwardAuthDescriptors(t *testing.T) {
	trusted, err := parsePrefixes([]string{"10.0.0.0/8", "192.0.2.1"})
	if err != nil {
		t.Fatal(err)
	}
	fa, err := newForwardAuth("gateway", "remote_address;method,path;header:X-Api-Key=api_key", trusted)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, peer, xff, key, want string
	}{
		{"trusted proxy", "10.1.2.3:5000", "203.0.113.9, 10.0.0.7", "", "[[{remote_address 203.0.113.9}] [{method DELETE} {path /admin/x}]]"},
		{"untrusted peer", "198.51.100.1:5000", "203.0.113.9", "k1", "[[{remote_address 198.51.100.1}] [{method DELETE} {path /admin/x}] [{api_key k1}]]"},
		{"single trusted IP", "192.0.2.1:1", "2001:db8::1", "", "[[{remote_address 2001:db8::1}] [{method DELETE} {path /admin/x}]]"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/forward-auth", nil)
		r.RemoteAddr = tc.peer
		r.Header.Set("X-Forwarded-For", tc.xff)
		r.Header.Set("X-Forwarded-Method", "DELETE")
		r.Header.Set("X-Forwarded-Uri", "/admin/x?y=1")
		if tc.key != "" {
			r.Header.Set("X-Api-Key", tc.key)
		}
		domain, ds, err := fa.parseForwardAuth(r)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if domain != "gateway" || fmt.Sprint(ds) != tc.want {
			t.Errorf("%s: %s %v, want gateway %s", tc.name, domain, ds, tc.want)
		}
	}
	r := httptest.NewRequest(http.MethodGet, "/forward-auth", nil)
	r.RemoteAddr = "10.1.2.3:5000"
	r.Header.Set("X-Forwarded-For", "not-an-ip")
	// httplimit ends the walk at the trusted hop that wrote garbage.
	if _, ds, err := fa.parseForwardAuth(r); err != nil || ds[0][0].Value != "10.1.2.3" {
		t.Errorf("bad X-Forwarded-For: %v, %v; want the proxy as the client", ds, err)
	}
	r = httptest.NewRequest(http.MethodGet, "/forward-auth", nil)
	r.Header.Set("X-Forwarded-Uri", "::bad")
	if _, _, err := fa.parseForwardAuth(r); err == nil || !isBadRequest(err) {
		t.Errorf("bad X-Forwarded-Uri: error %v, want a bad request", err)
	}

	// No entry is ever empty: an absolute URI without a path is the root,
	// and a request without a host gets no host descriptor.
	withHost, err := newForwardAuth("gateway", "path;host", trusted)
	if err != nil {
		t.Fatal(err)
	}
	r = httptest.NewRequest(http.MethodGet, "/forward-auth", nil)
	r.Host = ""
	r.Header.Set("X-Forwarded-Uri", "http://example.com")
	if _, ds, err := withHost.parseForwardAuth(r); err != nil || fmt.Sprint(ds) != "[[{path /}]]" {
		t.Errorf("URI without a path, no host: %v, %v; want [[{path /}]]", ds, err)
	}
}

func TestForwardAuthEndpoint(t *testing.T) {
	cfg := testConfig(t, gatewayRules)
	cfg.faDescriptors = "remote_address;header:X-Api-Key=api_key"
	srv := startServer(t, cfg)
	url := "http://" + srv.httpLn.Addr().String() + "/forward-auth?domain=gateway"
	call := func(key string) (int, http.Header) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("X-Forwarded-Method", "GET")
		req.Header.Set("X-Forwarded-Uri", "/")
		if key != "" {
			req.Header.Set("X-Api-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	for i := range 3 {
		if code, h := call("k"); code != http.StatusOK || h.Get("RateLimit") == "" {
			t.Fatalf("call %d: %d %v", i, code, h)
		}
	}
	if code, h := call("k"); code != http.StatusTooManyRequests || h.Get("Retry-After") == "" {
		t.Fatalf("fourth: %d %v", code, h)
	}
	if code, _ := call("other"); code != http.StatusOK {
		t.Fatalf("another key: %d", code)
	}
	if code, _ := call(""); code != http.StatusOK { // only remote_address applies
		t.Fatalf("no key: %d", code)
	}
	resp, err := http.Get("http://" + srv.httpLn.Addr().String() + "/forward-auth?domain=nope")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("unknown domain: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestCaddyForwardAuth puts a real Caddy (Debian's package) with
// forward_auth to sluice in front of a test upstream: requests within the
// limit reach the upstream; the one over it gets Sluice's 429 with
// Retry-After, the RateLimit fields and the problem body through Caddy.
func TestCaddyForwardAuth(t *testing.T) {
	caddy, err := exec.LookPath("caddy")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("caddy is not installed (apt-get install caddy); CI must run this test")
		}
		t.Skip("caddy is not installed: apt-get install caddy to run the gateway test")
	}
	cfg := testConfig(t, gatewayRules)
	cfg.faDescriptors = "remote_address;header:X-Api-Key=api_key"
	cfg.trustedProxies = listFlag{"127.0.0.1"}
	srv := startServer(t, cfg)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "upstream")
	}))
	t.Cleanup(upstream.Close)

	dir := t.TempDir()
	port := freePort(t)
	caddyfile := fmt.Sprintf(`{
	admin off
	auto_https off
}
http://127.0.0.1:%d {
	forward_auth %s {
		uri /forward-auth?domain=gateway
	}
	reverse_proxy %s
}
`, port, srv.httpLn.Addr(), strings.TrimPrefix(upstream.URL, "http://"))
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(caddyfile), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(caddy, "run", "--config", path, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("caddy output:\n%s", log.String())
		}
	})
	base := fmt.Sprintf("http://127.0.0.1:%d/", port)
	get := func(key string) (*reply, string, error) {
		req, _ := http.NewRequest(http.MethodGet, base, nil)
		req.Header.Set("X-Api-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return &reply{resp.StatusCode, resp.Header}, string(b), err
	}
	// Wait for Caddy, up to 10 s, with a key of its own.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, _, err := get("warmup")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("caddy did not answer: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := range 3 {
		resp, body, err := get("alice")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || body != "upstream" {
			t.Fatalf("request %d: %d %q, want the upstream's 200", i, resp.StatusCode, body)
		}
	}
	resp, body, err := get("alice")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("fourth request: %d %q, want 429", resp.StatusCode, body)
	}
	if ra := resp.Header.Get("Retry-After"); ra == "" {
		t.Fatal("no Retry-After through Caddy")
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q", ct)
	}
	var p struct {
		Status           int      `json:"status"`
		ViolatedPolicies []string `json:"violated-policies"`
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil || p.Status != 429 {
		t.Fatalf("problem body %q: %v", body, err)
	}
	rl, err := httpsfv.UnmarshalList(resp.Header.Values("RateLimit"))
	if err != nil || len(rl) == 0 {
		t.Fatalf("RateLimit %q: %v", resp.Header.Values("RateLimit"), err)
	}
	pol, err := httpsfv.UnmarshalList(resp.Header.Values("RateLimit-Policy"))
	if err != nil || len(pol) != len(rl) {
		t.Fatalf("RateLimit-Policy %q: %v", resp.Header.Values("RateLimit-Policy"), err)
	}
	found := false
	for _, m := range rl {
		it := m.(httpsfv.Item)
		if it.Value == "gateway.api_key" {
			found = true
			if r, _ := it.Params.Get("r"); r != int64(0) {
				t.Fatalf("api_key item %v: r=%v, want 0", it, r)
			}
		}
	}
	if !found {
		t.Fatalf("no gateway.api_key item in RateLimit %q", resp.Header.Values("RateLimit"))
	}
	// Another client key still passes.
	if resp, body, err := get("bob"); err != nil || resp.StatusCode != http.StatusOK || body != "upstream" {
		t.Fatalf("bob: %v %v %q", err, resp, body)
	}
}
