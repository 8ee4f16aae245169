package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/ratelimit"
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
		if len(rep.limits) != 1 || rep.limits[0].Count != 5 || rep.limits[0].Period != time.Minute {
			t.Fatalf("%s: limits read from the answers %+v, want 5 per minute", tc.protocol, rep.limits)
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

// sharedRules limit each user and, across every user, the plan: with
// four users the plan's bucket binds first.
const sharedRules = `
domain: shared
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: plan
    rate_limit: {unit: hour, requests_per_unit: 8}
`

// TestLoadtestDriftOverEveryDescriptor drives requests of two
// descriptors, one per key and one shared by every key: the exact
// limiter must decide both atomically, so it admits what the plan allows
// (8), not what the per-user rule alone would (4 keys × 5).
func TestLoadtestDriftOverEveryDescriptor(t *testing.T) {
	cfg := testConfig(t, sharedRules)
	cfg.memoryClock = nil // the exact replay goes by the system clock's windows
	srv := startServer(t, cfg)
	for _, protocol := range []string{"grpc", "json"} {
		addr := srv.grpcLn.Addr().String()
		if protocol == "json" {
			addr = srv.httpLn.Addr().String()
		}
		c := &loadConfig{protocol: protocol, addr: addr, domain: "shared",
			descriptor: "user={key}-" + protocol + "; plan=" + protocol, header: "X-Api-Key: {key}",
			keys: 4, rate: 200, concurrency: 4, duration: time.Second, algorithm: "fixedwindow", timeout: 2 * time.Second}
		if err := c.check(); err != nil {
			t.Fatal(err)
		}
		rep, err := loadtest(t.Context(), c, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if rep.errors != 0 {
			t.Fatalf("%s: %d errors (%v)", protocol, rep.errors, rep.firstError)
		}
		want := []ratelimit.Limit{ratelimit.Every(time.Hour, 5), ratelimit.Every(time.Hour, 8)}
		if len(rep.limits) != 2 || rep.limits[0] != want[0] || rep.limits[1] != want[1] {
			t.Fatalf("%s: limits %+v, want %+v", protocol, rep.limits, want)
		}
		// An hour's window ends during the test only once in 3600 runs;
		// then a request in flight may land on either side.
		if rep.exact < 8 || rep.exact > 10 || rep.admitted-rep.exact < -2 || rep.admitted-rep.exact > 2 {
			t.Fatalf("%s: admitted %d, exact limiter %d, want both about 8 (the shared plan)", protocol, rep.admitted, rep.exact)
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

// TestLoadtestForwardAuth drives /forward-auth, whose descriptors the
// service builds from -header: the limit comes from RateLimit-Policy and
// the exact limiter keys the rule by the header.
func TestLoadtestForwardAuth(t *testing.T) {
	cfg := testConfig(t, `
domain: fa
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
`)
	cfg.memoryClock = nil // the exact replay goes by the system clock's windows
	cfg.faDomain, cfg.faDescriptors = "fa", "header:X-Api-Key=user"
	srv := startServer(t, cfg)
	c := &loadConfig{protocol: "forward-auth", addr: srv.httpLn.Addr().String(), domain: "fa", descriptor: "user={key}",
		header: "X-Api-Key: {key}", keys: 4, rate: 200, concurrency: 4, duration: time.Second,
		algorithm: "fixedwindow", timeout: 2 * time.Second}
	if err := c.check(); err != nil {
		t.Fatal(err)
	}
	rep, err := loadtest(t.Context(), c, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if rep.errors != 0 {
		t.Fatalf("%d errors (%v)", rep.errors, rep.firstError)
	}
	if len(rep.limits) != 1 || rep.limits[0] != ratelimit.Every(time.Hour, 5) {
		t.Fatalf("limits %+v, want 5 per hour", rep.limits)
	}
	// 4 keys × 5; an hour's window ends during the test once in 3600 runs.
	if rep.exact < 20 || rep.exact > 24 || rep.admitted-rep.exact < -2 || rep.admitted-rep.exact > 2 {
		t.Fatalf("admitted %d, exact limiter %d, want both about 20", rep.admitted, rep.exact)
	}
}
