package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

const benchRules = `
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
`

func TestLoadtestMatchesExactLimiter(t *testing.T) {
	cfg := testConfig(t, benchRules)
	cfg.memoryClock = nil // the exact replay goes by the system clock's windows
	srv := startServer(t, cfg)
	for _, tc := range []struct{ protocol, addr string }{
		{"grpc", srv.grpcLn.Addr().String()},
		{"json", srv.httpLn.Addr().String()},
	} {
		c := &loadConfig{protocol: tc.protocol, addr: tc.addr, domain: "bench", descriptor: "user={key}-" + tc.protocol,
			header: "X-Api-Key: {key}", keys: 4, rate: 400, concurrency: 8, duration: time.Second,
			algorithm: "fixedwindow", timeout: 2 * time.Second}
		if err := c.check(); err != nil {
			t.Fatal(err)
		}
		rep, err := loadtest(t.Context(), c, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if rep.errors != 0 || rep.admitted == 0 || rep.denied == 0 {
			t.Fatalf("%s: admitted %d denied %d errors %d (%v)", tc.protocol, rep.admitted, rep.denied, rep.errors, rep.firstError)
		}
		if rep.limit.Count != 5 || rep.limit.Period != time.Minute {
			t.Fatalf("%s: limit read from the answers %+v, want 5 per minute", tc.protocol, rep.limit)
		}
		// Only a request that crossed a minute boundary in flight can
		// differ; the exact limiter replays send times.
		if d := rep.admitted - rep.exact; d < -2 || d > 2 {
			t.Fatalf("%s: admitted %d, exact limiter %d", tc.protocol, rep.admitted, rep.exact)
		}
		var out strings.Builder
		rep.print(&out, c)
		for _, want := range []string{"p50", "p99", "p99.9", "req/s", "drift", "errors 0"} {
			if !strings.Contains(out.String(), want) {
				t.Fatalf("report lacks %q:\n%s", want, out.String())
			}
		}
	}
}

func TestLoadtestRefusesOtherHosts(t *testing.T) {
	for _, addr := range []string{"192.0.2.1:8081", "10.0.0.1:80", "8.8.8.8:53"} {
		c := &loadConfig{protocol: "grpc", addr: addr, domain: "d", keys: 1, rate: 1, concurrency: 1, duration: time.Second, algorithm: "fixedwindow"}
		if err := c.check(); err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("%s: %v, want a loopback refusal", addr, err)
		}
	}
}
