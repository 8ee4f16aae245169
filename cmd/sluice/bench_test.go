package main

import (
	"io"
	"log/slog"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/internal/cputime"
	"github.com/sluicehq/sluice/policy"
)

const threeRules = `
domain: api
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: user
    descriptors:
      - key: path
        rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: plan
    value: free
    rate_limit: {unit: minute, requests_per_unit: 1000000000}
`

// newThreeRuleEngine returns an engine deciding threeRules on a memory
// store, and the 3-descriptor request every rule matches.
func newThreeRuleEngine(tb testing.TB) (*policy.Engine, *rlsv3.RateLimitRequest) {
	tb.Helper()
	c, err := policy.Parse("bench.yaml", []byte(threeRules))
	if err != nil {
		tb.Fatal(err)
	}
	set, err := policy.NewSet(c)
	if err != nil {
		tb.Fatal(err)
	}
	st, err := memstore.New()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	engine, err := policy.New(set, policy.WithStore(st))
	if err != nil {
		tb.Fatal(err)
	}
	return engine, rlsReq("api", rd("remote_address", "192.0.2.7"), rd("user", "u1", "path", "/login"), rd("plan", "free"))
}

// BenchmarkShouldRateLimit is one RLS call with 3 descriptors through the
// gRPC handler (no network) on the memory store, all admitted. Besides
// sec/op it reports cpu-ns/op, the process's CPU time per call, steadier
// than wall time on a shared machine.
func BenchmarkShouldRateLimit(b *testing.B) {
	engine, req := newThreeRuleEngine(b)
	for _, withMetrics := range []bool{false, true} {
		name := "metrics=off"
		svc := &service{engine: engine, log: slog.New(slog.NewTextHandler(io.Discard, nil)), limits: defaultLimits}
		if withMetrics {
			name = "metrics=on"
			svc.metrics = newMetrics("memory")
		}
		srv := &rlsServer{svc: svc}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := cputime.Process()
			for b.Loop() {
				resp, err := srv.ShouldRateLimit(b.Context(), req)
				if err != nil || resp.GetOverallCode() != ok {
					b.Fatal(resp, err)
				}
			}
			if cpu := cputime.Process() - cpu0; cpu > 0 {
				b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
			}
		})
	}
}

// TestShouldRateLimitAllocations bounds what the RLS handler allocates
// on top of the engine's decision, for 3 descriptors with metrics on: the
// request's descriptors and their entries (2, they go to the engine
// through an interface), the response with its statuses and header
// values (1, rlsAnswer) and the RateLimit line (1). The RateLimit-Policy
// line and the quotas the fields are formatted from are reused. Before
// httplimit.Formatter the headers alone cost 12 (a stub request through
// the middleware, a header map, a line per item).
func TestShouldRateLimitAllocations(t *testing.T) {
	engine, req := newThreeRuleEngine(t)
	svc := &service{engine: engine, log: slog.New(slog.NewTextHandler(io.Discard, nil)), limits: defaultLimits,
		metrics: newMetrics("memory")}
	srv := &rlsServer{svc: svc}
	ctx := t.Context()
	ds, hits, err := svc.fromRLS(req)
	if err != nil {
		t.Fatal(err)
	}
	var resp *rlsv3.RateLimitResponse
	handler := testing.AllocsPerRun(1000, func() { resp, err = srv.ShouldRateLimit(ctx, req) })
	if err != nil || resp.GetOverallCode() != ok || len(resp.GetResponseHeadersToAdd()) != 2 {
		t.Fatalf("answer %v, %v", resp, err)
	}
	decide := testing.AllocsPerRun(1000, func() { _, err = engine.Decide(ctx, "api", ds, hits) })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("RLS handler %.1f allocations per call, the engine's decision %.1f", handler, decide)
	if own := handler - decide; own > 4 {
		t.Errorf("the RLS handler allocates %.1f times per call on top of the engine's %.1f, want at most 4", own, decide)
	}
}
