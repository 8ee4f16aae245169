package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/policy"
)

// TestOtelFlag checks that SLUICE_OTEL=true makes the engine report its
// decisions to the global meter provider.
func TestOtelFlag(t *testing.T) {
	cfg, fs := newServeFlags(io.Discard)
	env := map[string]string{"SLUICE_OTEL": "true"}
	if err := parseFlags(fs, nil, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if !cfg.otel {
		t.Fatal("SLUICE_OTEL=true did not set -otel")
	}

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	otel.SetMeterProvider(mp)

	c, err := policy.Parse("otel.yaml", []byte(threeRules))
	if err != nil {
		t.Fatal(err)
	}
	set, err := policy.NewSet(c)
	if err != nil {
		t.Fatal(err)
	}
	st, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	var closers []func() error
	t.Cleanup(func() {
		for _, f := range closers {
			_ = f()
		}
		_ = st.Close()
	})
	opts, err := engineOptions(cfg.otel)
	if err != nil {
		t.Fatal(err)
	}
	engine, err := newEngine(set, st, slog.New(slog.DiscardHandler), &closers, opts...)
	if err != nil {
		t.Fatal(err)
	}
	res, err := engine.Decide(t.Context(), "api", []policy.Descriptor{{{Key: "remote_address", Value: "192.0.2.7"}}}, 1)
	if err != nil || !res.Allowed {
		t.Fatalf("Decide: %+v, %v", res, err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	var decisions int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "sluice.decisions" {
				for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
					decisions += p.Value
				}
			}
		}
	}
	if decisions != 1 {
		t.Fatalf("sluice.decisions = %d after one decision, want 1", decisions)
	}
}

// TestOtelFlagHelpSaysNoExporter checks that -h does not let a user
// believe -otel alone exports anything: the stock binary links no
// exporter (docs/otel.md).
func TestOtelFlagHelpSaysNoExporter(t *testing.T) {
	_, fs := newServeFlags(io.Discard)
	usage := fs.Lookup("otel").Usage
	for _, want := range []string{"links no exporter", "reports nothing unless", "docs/otel.md"} {
		if !strings.Contains(usage, want) {
			t.Errorf("-otel help lacks %q: %s", want, usage)
		}
	}
}
