package main

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice/policy/policytest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// The rules of envoyproxy/ratelimit's README examples 2 to 7 and 9; the
// policy package's tests share the first two.
const (
	messagingRules = policytest.EnvoyMessaging
	perIPRules     = policytest.EnvoyPerIP
	levelRules     = `
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
`
	unlimitedRules = `
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
`
	shadowRules = `
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: minute
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: minute
`
	replacesRules = `
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: minute
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: minute
`
	wildcardRules = `
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: path
    value: /api/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 3
`
)

func equalCodes(t *testing.T, call string, resp *rlsv3.RateLimitResponse, want ...rlsv3.RateLimitResponse_Code) {
	t.Helper()
	got := codesOf(resp)
	if len(got) != len(want) {
		t.Fatalf("%s: codes %v, want %v", call, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: codes %v (overall first), want %v", call, got, want)
		}
	}
}

func TestRLSNestedDescriptorsAndAtomicity(t *testing.T) {
	srv := startServer(t, testConfig(t, messagingRules))
	c := rlsClient(t, srv)
	ctx := t.Context()
	both := rlsReq("messaging", rd("message_type", "marketing", "to_number", "2061111111"), rd("to_number", "2061111111"))
	for i := range 5 {
		resp, err := c.ShouldRateLimit(ctx, both)
		if err != nil {
			t.Fatal(err)
		}
		equalCodes(t, "call", resp, ok, ok, ok)
		st := resp.GetStatuses()
		if got := st[0].GetLimitRemaining(); got != uint32(4-i) {
			t.Fatalf("call %d: marketing remaining %d, want %d", i, got, 4-i)
		}
		if got := st[1].GetLimitRemaining(); got != uint32(99-i) {
			t.Fatalf("call %d: per-number remaining %d, want %d", i, got, 99-i)
		}
		lim := st[0].GetCurrentLimit()
		if lim.GetRequestsPerUnit() != 5 || lim.GetUnit() != rlsv3.RateLimitResponse_RateLimit_DAY {
			t.Fatalf("marketing current_limit %v, want 5 per DAY", lim)
		}
		if d := st[0].GetDurationUntilReset().AsDuration(); d <= 0 {
			t.Fatalf("duration_until_reset %v, want > 0", d)
		}
	}
	// The sixth marketing message is over its limit: the request is denied
	// and, unlike envoyproxy/ratelimit, the per-number rule is not charged.
	resp, err := c.ShouldRateLimit(ctx, both)
	if err != nil {
		t.Fatal(err)
	}
	equalCodes(t, "sixth", resp, over, over, ok)
	if got := resp.GetStatuses()[0].GetLimitRemaining(); got != 0 {
		t.Fatalf("denied status remaining %d, want 0", got)
	}
	hdr := headersOf(resp)
	if hdr.Get("Retry-After") == "" {
		t.Fatalf("no Retry-After in response_headers_to_add: %v", hdr)
	}
	resp, err = c.ShouldRateLimit(ctx, rlsReq("messaging", rd("to_number", "2061111111")))
	if err != nil {
		t.Fatal(err)
	}
	equalCodes(t, "per-number alone", resp, ok, ok)
	if got := resp.GetStatuses()[0].GetLimitRemaining(); got != 94 {
		t.Fatalf("per-number remaining %d after 5 admitted and 1 denied request, want 94 (the denial consumed something)", got)
	}
	// Another number has its own marketing bucket.
	resp, err = c.ShouldRateLimit(ctx, rlsReq("messaging", rd("message_type", "marketing", "to_number", "2062222222")))
	if err != nil {
		t.Fatal(err)
	}
	equalCodes(t, "other number", resp, ok, ok)
}

func TestRLSMostSpecificMatchAndLevels(t *testing.T) {
	srv := startServer(t, testConfig(t, perIPRules, levelRules))
	c := rlsClient(t, srv)
	ctx := t.Context()
	resp, err := c.ShouldRateLimit(ctx, rlsReq("edge_proxy_per_ip", rd("remote_address", "50.0.0.5")))
	if err != nil {
		t.Fatal(err)
	}
	equalCodes(t, "blocked IP", resp, over, over)
	resp, err = c.ShouldRateLimit(ctx, rlsReq("edge_proxy_per_ip", rd("remote_address", "50.0.0.1")))
	if err != nil {
		t.Fatal(err)
	}
	equalCodes(t, "other IP", resp, ok, ok)
	if lim := resp.GetStatuses()[0].GetCurrentLimit(); lim.GetRequestsPerUnit() != 10 || lim.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND {
		t.Fatalf("current_limit %v, want 10 per SECOND", lim)
	}
	// Two tuples do not match a one-level rule: OK without a limit.
	resp, err = c.ShouldRateLimit(ctx, rlsReq("example4", rd("key", "value", "subkey", "subvalue")))
	if err != nil {
		t.Fatal(err)
	}
	equalCodes(t, "deeper descriptor", resp, ok, ok)
	if resp.GetStatuses()[0].GetCurrentLimit() != nil {
		t.Fatalf("unmatched descriptor has current_limit %v", resp.GetStatuses()[0].GetCurrentLimit())
	}
}

func TestRLSUnlimited(t *testing.T) {
	srv := startServer(t, testConfig(t, unlimitedRules))
	c := rlsClient(t, srv)
	resp, err := c.ShouldRateLimit(t.Context(), rlsReq("internal", rd("ldap", "x"), rd("azure", "y")))
	if err != nil {
		t.Fatal(err)
	}
	equalCodes(t, "call", resp, ok, ok, ok)
	st := resp.GetStatuses()
	if st[0].GetLimitRemaining() != math.MaxUint32 || st[0].GetCurrentLimit() != nil {
		t.Fatalf("unlimited status %v, want OK with limit_remaining MaxUint32 and no current_limit", st[0])
	}
	if st[1].GetLimitRemaining() != 99 || st[1].GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
		t.Fatalf("azure status %v, want 99 remaining of 100 per MINUTE", st[1])
	}
}

func TestRLSShadowMode(t *testing.T) {
	srv := startServer(t, testConfig(t, shadowRules))
	c := rlsClient(t, srv)
	ctx := t.Context()
	userA := rlsReq("example6", rd("service", "auth-service", "user", "user-a"))
	for i := range 15 {
		resp, err := c.ShouldRateLimit(ctx, userA)
		if err != nil {
			t.Fatal(err)
		}
		equalCodes(t, "user-a", resp, ok, ok) // shadow mode never denies
		_ = i
	}
	userB := rlsReq("example6", rd("service", "auth-service", "user", "user-b"))
	for i := range 21 {
		resp, err := c.ShouldRateLimit(ctx, userB)
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 20; (resp.GetOverallCode() == ok) != want {
			t.Fatalf("user-b call %d: %v", i, resp.GetOverallCode())
		}
	}
}

func TestRLSReplaces(t *testing.T) {
	srv := startServer(t, testConfig(t, replacesRules))
	c := rlsClient(t, srv)
	ctx := t.Context()
	both := rlsReq("example7", rd("key_1", "value_1", "user", "bkthomps"), rd("key_2", "value_2", "user", "bkthomps"))
	for i := range 11 {
		resp, err := c.ShouldRateLimit(ctx, both)
		if err != nil {
			t.Fatal(err)
		}
		if i < 10 {
			equalCodes(t, "both", resp, ok, ok, ok)
			if resp.GetStatuses()[0].GetCurrentLimit() != nil {
				t.Fatalf("the replaced rule still applies: %v", resp.GetStatuses()[0])
			}
			if got := resp.GetStatuses()[1].GetCurrentLimit().GetRequestsPerUnit(); got != 10 {
				t.Fatalf("replacing rule limit %d, want 10", got)
			}
			continue
		}
		equalCodes(t, "eleventh", resp, over, ok, over)
	}
	// The replaced rule was not charged: its own requests get its 5.
	resp, err := c.ShouldRateLimit(ctx, rlsReq("example7", rd("key_1", "value_1", "user", "bkthomps")))
	if err != nil {
		t.Fatal(err)
	}
	equalCodes(t, "specific alone", resp, ok, ok)
	if got := resp.GetStatuses()[0].GetLimitRemaining(); got != 4 {
		t.Fatalf("specific_limit remaining %d, want 4", got)
	}
}

func TestRLSWildcards(t *testing.T) {
	srv := startServer(t, testConfig(t, wildcardRules))
	c := rlsClient(t, srv)
	ctx := t.Context()
	resp, err := c.ShouldRateLimit(ctx, rlsReq("example9", rd("key1", "valueXYZ"), rd("key1", "other"), rd("path", "/api/123/action"), rd("path", "/api/123/other")))
	if err != nil {
		t.Fatal(err)
	}
	equalCodes(t, "call", resp, ok, ok, ok, ok, ok)
	st := resp.GetStatuses()
	want := []uint32{20, 0, 3, 0}
	for i, w := range want {
		if got := st[i].GetCurrentLimit().GetRequestsPerUnit(); got != w {
			t.Fatalf("descriptor %d: limit %d, want %d", i, got, w)
		}
	}
}

func TestRLSHitsAddend(t *testing.T) {
	srv := startServer(t, testConfig(t, unlimitedRules))
	c := rlsClient(t, srv)
	ctx := t.Context()
	req := rlsReq("internal", rd("azure", "h"))
	req.HitsAddend = 7
	resp, err := c.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetStatuses()[0].GetLimitRemaining(); got != 93 {
		t.Fatalf("remaining %d after hits_addend 7, want 93", got)
	}
	// A descriptor's own hits_addend wins; 0 peeks.
	req = rlsReq("internal", rd("azure", "h"))
	req.HitsAddend = 5
	req.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
	resp, err = c.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetStatuses()[0].GetLimitRemaining(); got != 93 {
		t.Fatalf("remaining %d after a peek, want 93", got)
	}
}

func TestRLSBadInputConsumesNothing(t *testing.T) {
	cfg := testConfig(t, unlimitedRules)
	cfg.maxDescriptors = 4
	srv := startServer(t, cfg)
	c := rlsClient(t, srv)
	ctx := t.Context()
	many := rlsReq("internal")
	for range 5 {
		many.Descriptors = append(many.Descriptors, rd("azure", "bad"))
	}
	huge := rlsReq("internal", rd("azure", "bad"))
	huge.HitsAddend = math.MaxUint32
	hugeOwn := rlsReq("internal", rd("azure", "bad"))
	hugeOwn.Descriptors[0].HitsAddend = wrapperspb.UInt64(math.MaxUint64)
	mixed := rlsReq("internal", rd("azure", "bad"), rd("azure", "bad2"))
	mixed.Descriptors[0].HitsAddend = wrapperspb.UInt64(1)
	mixed.Descriptors[1].HitsAddend = wrapperspb.UInt64(2)
	for name, req := range map[string]*rlsv3.RateLimitRequest{
		"empty domain":          rlsReq("", rd("azure", "bad")),
		"unknown domain":        rlsReq("nope", rd("azure", "bad")),
		"no descriptors":        rlsReq("internal"),
		"empty descriptor":      rlsReq("internal", rd()),
		"empty key":             rlsReq("internal", rd("azure", "bad"), rd("", "v")),
		"too many descriptors":  many,
		"huge hits_addend":      huge,
		"huge own hits_addend":  hugeOwn,
		"differing hits_addend": mixed,
	} {
		_, err := c.ShouldRateLimit(ctx, req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: error %v, want InvalidArgument", name, err)
		}
	}
	resp, err := c.ShouldRateLimit(ctx, rlsReq("internal", rd("azure", "bad")))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetStatuses()[0].GetLimitRemaining(); got != 99 {
		t.Fatalf("remaining %d after refused requests, want 99 (a refused request consumed)", got)
	}
}

func TestRLSRateLimitFields(t *testing.T) {
	srv := startServer(t, testConfig(t, messagingRules))
	c := rlsClient(t, srv)
	resp, err := c.ShouldRateLimit(t.Context(), rlsReq("messaging", rd("to_number", "1")))
	if err != nil {
		t.Fatal(err)
	}
	hdr := headersOf(resp)
	pol, err := httpsfv.UnmarshalList(hdr.Values("RateLimit-Policy"))
	if err != nil || len(pol) != 1 {
		t.Fatalf("RateLimit-Policy %q: %v", hdr.Values("RateLimit-Policy"), err)
	}
	item := pol[0].(httpsfv.Item)
	if q, _ := item.Params.Get("q"); q != int64(100) {
		t.Fatalf("RateLimit-Policy q=%v, want 100", q)
	}
	if w, _ := item.Params.Get("w"); w != int64(86400) {
		t.Fatalf("RateLimit-Policy w=%v, want 86400", w)
	}
	rl, err := httpsfv.UnmarshalList(hdr.Values("RateLimit"))
	if err != nil || len(rl) != 1 {
		t.Fatalf("RateLimit %q: %v", hdr.Values("RateLimit"), err)
	}
	if r, _ := rl[0].(httpsfv.Item).Params.Get("r"); r != int64(99) {
		t.Fatalf("RateLimit r=%v, want 99", r)
	}
	if hdr.Get("Retry-After") != "" {
		t.Fatalf("Retry-After on an allowed request: %q", hdr.Get("Retry-After"))
	}
}

// headersOf collects response_headers_to_add.
func headersOf(resp *rlsv3.RateLimitResponse) http.Header {
	h := http.Header{}
	for _, hv := range resp.GetResponseHeadersToAdd() {
		h.Add(hv.GetKey(), hv.GetValue())
	}
	return h
}

func TestRLSUnit(t *testing.T) {
	for _, tc := range []struct {
		count  int64
		period time.Duration
		n      uint32
		unit   rlsv3.RateLimitResponse_RateLimit_Unit
	}{
		{10, time.Second, 10, rlsv3.RateLimitResponse_RateLimit_SECOND},
		{5, 24 * time.Hour, 5, rlsv3.RateLimitResponse_RateLimit_DAY},
		{120, 2 * time.Minute, 60, rlsv3.RateLimitResponse_RateLimit_MINUTE},
		{7, 1500 * time.Millisecond, 7, rlsv3.RateLimitResponse_RateLimit_UNKNOWN},
		{1 << 40, time.Second, math.MaxUint32, rlsv3.RateLimitResponse_RateLimit_SECOND},
	} {
		n, u := rlsUnit(tc.count, tc.period)
		if n != tc.n || u != tc.unit {
			t.Errorf("rlsUnit(%d, %v) = %d %v, want %d %v", tc.count, tc.period, n, u, tc.n, tc.unit)
		}
		if p := unitPeriod(u); u != rlsv3.RateLimitResponse_RateLimit_UNKNOWN && p == 0 {
			t.Errorf("unitPeriod(%v) = 0", u)
		}
	}
}
