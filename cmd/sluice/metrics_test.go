package main

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape fetches url and parses it with the Prometheus text parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// counter returns the value of the family's series with labels.
func counter(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if got[k] != v {
				continue next
			}
		}
		return m.GetCounter().GetValue()
	}
	return 0
}

func TestMetricsAndHealth(t *testing.T) {
	cfg := testConfig(t, shadowRules)
	cfg.adminAddr = "127.0.0.1:0" // a listener apart from decisions
	cfg.watch = true
	srv := startServer(t, cfg)
	c := rlsClient(t, srv)
	ctx := t.Context()
	for range 12 {
		if _, err := c.ShouldRateLimit(ctx, rlsReq("example6", rd("service", "s", "user", "user-a"))); err != nil {
			t.Fatal(err)
		}
	}
	for range 21 {
		if _, err := c.ShouldRateLimit(ctx, rlsReq("example6", rd("service", "s", "user", "user-b"))); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = c.ShouldRateLimit(ctx, rlsReq("nope", rd("k", "v")))

	admin := "http://" + srv.adminLn.Addr().String()
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(admin + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
	}
	// The decision listener does not serve the admin endpoints.
	resp, err := http.Get("http://" + srv.httpLn.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/metrics on the decision listener: %d, want 404", resp.StatusCode)
	}

	// A bad rules file is refused and counted; a good one is reloaded.
	file := filepath.Join(cfg.rules, "0.yaml")
	if err := os.WriteFile(file, []byte("domain: example6\ndescriptors: [{key: x, rate_limit: {unit: fortnight, requests_per_unit: 1}}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		return counter(scrape(t, admin+"/metrics"), "sluice_rule_reload_errors_total", nil) == 1
	})
	if err := os.WriteFile(file, []byte(shadowRules+"\n# changed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		return counter(scrape(t, admin+"/metrics"), "sluice_rule_reloads_total", nil) == 1
	})

	fams := scrape(t, admin+"/metrics")
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"sluice_decisions_total", map[string]string{"domain": "example6", "outcome": "allowed"}, 10 + 20},
		{"sluice_decisions_total", map[string]string{"domain": "example6", "outcome": "shadow_denied"}, 2},
		{"sluice_decisions_total", map[string]string{"domain": "example6", "outcome": "denied"}, 1},
		{"sluice_shadow_hits_total", map[string]string{"domain": "example6"}, 2},
		{"sluice_requests_total", map[string]string{"api": "grpc", "outcome": "ok"}, 12 + 20},
		{"sluice_requests_total", map[string]string{"api": "grpc", "outcome": "over_limit"}, 1},
		{"sluice_requests_total", map[string]string{"api": "grpc", "outcome": "invalid"}, 1},
	} {
		// decisions_total has one series per rule; sum those matching.
		got := 0.0
		for _, m := range fams[tc.name].GetMetric() {
			match := true
			for _, l := range m.GetLabel() {
				if w, ok := tc.labels[l.GetName()]; ok && w != l.GetValue() {
					match = false
				}
			}
			if match {
				got += m.GetCounter().GetValue()
			}
		}
		if got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	h := fams["sluice_store_latency_seconds"]
	if h == nil || h.GetMetric()[0].GetHistogram().GetSampleCount() != 33 {
		t.Errorf("store latency histogram: %v", h)
	}
}

// waitFor polls cond every 10 ms for up to 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
