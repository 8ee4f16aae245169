package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// reply is the status and header a client got.
type reply struct {
	StatusCode int
	Header     http.Header
}

func postJSON(t *testing.T, srv *server, body string) (*reply, []byte) {
	t.Helper()
	resp, err := http.Post("http://"+srv.httpLn.Addr().String()+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return &reply{resp.StatusCode, resp.Header}, b
}

func TestJSONEndpoint(t *testing.T) {
	srv := startServer(t, testConfig(t, `
domain: dummy
descriptors:
  - key: one_per_day
    rate_limit:
      unit: day
      requests_per_unit: 1
  - key: two_per_minute
    rate_limit:
      unit: minute
      requests_per_unit: 2
`))
	body := `{"domain": "dummy", "descriptors": [
		{"entries": [{"key": "one_per_day", "value": "something"}]},
		{"entries": [{"key": "two_per_minute", "value": "x"}]}]}`
	resp, b := postJSON(t, srv, body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first: status %d, body %s", resp.StatusCode, b)
	}
	var out rlsv3.RateLimitResponse
	if err := protojson.Unmarshal(b, &out); err != nil {
		t.Fatalf("response is not a RateLimitResponse in protobuf JSON: %v: %s", err, b)
	}
	if out.GetOverallCode() != ok || out.GetStatuses()[1].GetLimitRemaining() != 1 {
		t.Fatalf("first: %v", &out)
	}
	if resp.Header.Get("RateLimit") == "" || resp.Header.Get("RateLimit-Policy") == "" {
		t.Fatalf("no RateLimit fields: %v", resp.Header)
	}
	resp, b = postJSON(t, srv, body)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second: status %d, want 429; body %s", resp.StatusCode, b)
	}
	// The shape envoyproxy/ratelimit documents.
	var doc struct {
		OverallCode string `json:"overallCode"`
		Statuses    []struct {
			Code         string `json:"code"`
			CurrentLimit struct {
				RequestsPerUnit int    `json:"requestsPerUnit"`
				Unit            string `json:"unit"`
			} `json:"currentLimit"`
			LimitRemaining int `json:"limitRemaining"`
		} `json:"statuses"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.OverallCode != "OVER_LIMIT" || doc.Statuses[0].Code != "OVER_LIMIT" || doc.Statuses[0].CurrentLimit.Unit != "DAY" ||
		doc.Statuses[1].Code != "OK" {
		t.Fatalf("second: %s", b)
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
	// The denied request took nothing from two_per_minute: one is left.
	resp, b = postJSON(t, srv, `{"domain": "dummy", "descriptors": [{"entries": [{"key": "two_per_minute", "value": "x"}]}]}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("third: status %d: %s", resp.StatusCode, b)
	}
}

func TestJSONBadRequests(t *testing.T) {
	cfg := testConfig(t, `
domain: dummy
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
`)
	cfg.maxBodyBytes = 512
	srv := startServer(t, cfg)
	for name, body := range map[string]string{
		"malformed":       `{"domain": "dummy", "descriptors": [`,
		"wrong type":      `{"domain": 5}`,
		"unknown field":   `{"domain": "dummy", "nope": 1}`,
		"negative hits":   `{"domain": "dummy", "hitsAddend": -1, "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}`,
		"huge hits":       `{"domain": "dummy", "hitsAddend": 4000000000, "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}`,
		"empty domain":    `{"descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}`,
		"unknown domain":  `{"domain": "other", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}`,
		"no descriptors":  `{"domain": "dummy"}`,
		"empty key":       `{"domain": "dummy", "descriptors": [{"entries": [{"key": "", "value": "v"}]}]}`,
		"oversized body":  `{"domain": "dummy", "descriptors": [{"entries": [{"key": "k", "value": "` + strings.Repeat("v", 600) + `"}]}]}`,
		"empty body":      ``,
		"not JSON at all": "\x00\xff",
	} {
		resp, b := postJSON(t, srv, body)
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: status %d %q, want 400 problem+json; body %s", name, resp.StatusCode, resp.Header.Get("Content-Type"), b)
			continue
		}
		var p struct {
			Status int    `json:"status"`
			Detail string `json:"detail"`
		}
		if err := json.Unmarshal(b, &p); err != nil || p.Status != 400 || p.Detail == "" {
			t.Errorf("%s: problem body %s (%v)", name, b, err)
		}
	}
	resp, b := postJSON(t, srv, `{"domain": "dummy", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}`)
	var out rlsv3.RateLimitResponse
	if err := protojson.Unmarshal(b, &out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if got := out.GetStatuses()[0].GetLimitRemaining(); got != 9 {
		t.Fatalf("remaining %d after refused requests, want 9", got)
	}
	get, err := http.Get("http://" + srv.httpLn.Addr().String() + "/json")
	if err != nil {
		t.Fatal(err)
	}
	get.Body.Close()
	if get.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /json: %d, want 405", get.StatusCode)
	}
}
