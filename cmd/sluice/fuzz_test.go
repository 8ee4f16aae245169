package main

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/policy"
)

// fuzzService is a service on the memory store with a few rules, for the
// fuzz targets.
func fuzzService(f *testing.F) *service {
	c, err := policy.Parse("fuzz.yaml", []byte(`
domain: fuzz
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1000000}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1000000}
  - key: api_key
    value: "a*"
    rate_limit: {unlimited: true}
`))
	if err != nil {
		f.Fatal(err)
	}
	set, err := policy.NewSet(c)
	if err != nil {
		f.Fatal(err)
	}
	st, err := memstore.New()
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	engine, err := policy.New(set, policy.WithStore(st))
	if err != nil {
		f.Fatal(err)
	}
	limits := defaultLimits
	limits.maxBodyBytes = 4 << 10
	return &service{engine: engine, log: slog.New(slog.NewTextHandler(io.Discard, nil)), limits: limits}
}

// FuzzJSON feeds /json arbitrary bodies: every answer is 200, 429 or a
// 400 problem, never a panic or a 5xx.
func FuzzJSON(f *testing.F) {
	svc := fuzzService(f)
	for _, seed := range []string{
		`{"domain": "fuzz", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}`,
		`{"domain": "fuzz", "hitsAddend": 3, "descriptors": [{"entries": [{"key": "k", "value": "v"}], "hitsAddend": "2"}]}`,
		`{"domain": "fuzz", "descriptors": [{"entries": [{"key": "api_key", "value": "abc"}]}, {"entries": [{"key": "", "value": "v"}]}]}`,
		`{"domain": "", "descriptors": []}`,
		`{"domain": "fuzz", "descriptors": [{"entries": [{"key": "k"}], "limit": {"requestsPerUnit": 1, "unit": "SECOND"}}]}`,
		`[]`, `null`, `{"domain": "fuzz"`, "\xff\xfe",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		svc.handleJSON(w, httptest.NewRequest(http.MethodPost, "/json", bytes.NewReader(body)))
		switch w.Code {
		case http.StatusOK, http.StatusTooManyRequests:
		case http.StatusBadRequest:
			if w.Header().Get("Content-Type") != "application/problem+json" {
				t.Fatalf("400 without problem+json: %q", w.Header().Get("Content-Type"))
			}
		default:
			t.Fatalf("status %d for %q: %s", w.Code, body, w.Body.String())
		}
	})
}

// FuzzForwardAuth feeds the forward-auth parser arbitrary forwarded
// headers and peers: it returns descriptors the engine accepts or a
// bad-request error, never a panic.
func FuzzForwardAuth(f *testing.F) {
	svc := fuzzService(f)
	fa, err := newForwardAuth("fuzz", "remote_address;method,path;header:X-Api-Key=api_key;host", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")})
	if err != nil {
		f.Fatal(err)
	}
	handler := svc.handleForwardAuth(fa)
	f.Add("10.0.0.1:80", "203.0.113.7, 10.0.0.2", "GET", "/a?b=c", "key", "example.com", "fuzz")
	f.Add("192.0.2.1:1", "garbage", "", "::", "", "", "")
	f.Add("[2001:db8::1]:443", "2001:db8::2", "POST", "/%zz", "a\x00", "h", "nope")
	f.Fuzz(func(t *testing.T, peer, xff, method, uri, apiKey, host, domain string) {
		r := httptest.NewRequest(http.MethodGet, "/forward-auth", nil)
		q := r.URL.Query()
		q.Set("domain", domain)
		r.URL.RawQuery = q.Encode()
		r.RemoteAddr = peer
		for name, v := range map[string]string{"X-Forwarded-For": xff, "X-Forwarded-Method": method,
			"X-Forwarded-Uri": uri, "X-Api-Key": apiKey, "X-Forwarded-Host": host} {
			if v != "" {
				r.Header.Set(name, v)
			}
		}
		_, ds, err := fa.parseForwardAuth(r)
		if err != nil && !errors.Is(err, errBadRequest) {
			t.Fatalf("error %v is not a bad request", err)
		}
		for _, d := range ds {
			for _, e := range d {
				if e.Key == "" || e.Value == "" {
					t.Fatalf("descriptor %v has an empty key or value", d)
				}
			}
		}
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		if w.Code != http.StatusOK && w.Code != http.StatusTooManyRequests && w.Code != http.StatusBadRequest {
			t.Fatalf("status %d: %s", w.Code, w.Body.String())
		}
	})
}
