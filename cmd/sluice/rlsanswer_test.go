package main

import (
	"math"
	"strings"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestRLSLimitOverrideRefused checks that a descriptor's limit override,
// which the engine cannot decide atomically with the rules (see
// docs/service.md), is refused as InvalidArgument and consumes nothing.
func TestRLSLimitOverrideRefused(t *testing.T) {
	srv := startServer(t, testConfig(t, unlimitedRules))
	c := rlsClient(t, srv)
	req := rlsReq("internal", rd("azure", "override"), rd("azure", "plain"))
	req.Descriptors[0].Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
	_, err := c.ShouldRateLimit(t.Context(), req)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "override") {
		t.Fatalf("override: %v, want InvalidArgument naming the override", err)
	}
	resp, err := c.ShouldRateLimit(t.Context(), rlsReq("internal", rd("azure", "override"), rd("azure", "plain")))
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range resp.GetStatuses() {
		if st.GetLimitRemaining() != 99 {
			t.Fatalf("descriptor %d: remaining %d after a refused override, want 99", i, st.GetLimitRemaining())
		}
	}
}

// TestRLSManyDescriptors answers more descriptors than one rlsAnswer
// holds: every status and every limited rule's item is there.
func TestRLSManyDescriptors(t *testing.T) {
	srv := startServer(t, testConfig(t, unlimitedRules))
	c := rlsClient(t, srv)
	req := rlsReq("internal", rd("ldap", "x"))
	for _, v := range []string{"a", "b", "c", "d", "e"} {
		req.Descriptors = append(req.Descriptors, rd("azure", v))
	}
	req.Descriptors = append(req.Descriptors, rd("nomatch", "z"))
	resp, err := c.ShouldRateLimit(t.Context(), req)
	if err != nil || resp.GetOverallCode() != ok {
		t.Fatalf("%v, %v", codesOf(resp), err)
	}
	st := resp.GetStatuses()
	if len(st) != 7 {
		t.Fatalf("%d statuses for 7 descriptors", len(st))
	}
	if st[0].GetLimitRemaining() != math.MaxUint32 || st[0].GetCurrentLimit() != nil {
		t.Fatalf("unlimited ldap: %v", st[0])
	}
	for i := 1; i <= 5; i++ {
		if st[i].GetLimitRemaining() != 99 || st[i].GetCurrentLimit().GetRequestsPerUnit() != 100 ||
			st[i].GetDurationUntilReset() == nil {
			t.Fatalf("azure descriptor %d: %v", i, st[i])
		}
	}
	if st[6].GetCurrentLimit() != nil || st[6].GetCode() != ok {
		t.Fatalf("unmatched descriptor: %v", st[6])
	}
	if got := rateLimitItems(t, headersOf(resp).Values("RateLimit"), "r"); len(got) != 1 || got["internal.azure"] != 99 {
		t.Fatalf("RateLimit %q, want the azure rule's items", headersOf(resp).Values("RateLimit"))
	}
	rl := headersOf(resp).Values("RateLimit")
	if n := strings.Count(strings.Join(rl, ","), `"internal.azure"`); n != 5 {
		t.Fatalf("RateLimit %q: %d azure items, want 5", rl, n)
	}
}
