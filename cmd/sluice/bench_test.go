package main

import (
	"io"
	"log/slog"
	"testing"

	"github.com/sluicehq/sluice/core/memstore"
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

// BenchmarkShouldRateLimit is one RLS call with 3 descriptors through the
// gRPC handler (no network) on the memory store, all admitted.
func BenchmarkShouldRateLimit(b *testing.B) {
	c, err := policy.Parse("bench.yaml", []byte(threeRules))
	if err != nil {
		b.Fatal(err)
	}
	set, err := policy.NewSet(c)
	if err != nil {
		b.Fatal(err)
	}
	st, err := memstore.New()
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	engine, err := policy.New(set, policy.WithStore(st))
	if err != nil {
		b.Fatal(err)
	}
	for _, withMetrics := range []bool{false, true} {
		name := "metrics=off"
		svc := &service{engine: engine, log: slog.New(slog.NewTextHandler(io.Discard, nil)), limits: defaultLimits}
		if withMetrics {
			name = "metrics=on"
			svc.metrics = newMetrics("memory")
		}
		srv := &rlsServer{svc: svc}
		req := rlsReq("api", rd("remote_address", "192.0.2.7"), rd("user", "u1", "path", "/login"), rd("plan", "free"))
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				resp, err := srv.ShouldRateLimit(b.Context(), req)
				if err != nil || resp.GetOverallCode() != ok {
					b.Fatal(resp, err)
				}
			}
		})
	}
}
