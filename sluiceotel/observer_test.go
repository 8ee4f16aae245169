package sluiceotel_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms/gcra"
	"github.com/sluicehq/sluice/core/memstore"
	"github.com/sluicehq/sluice/core/ratelimit"
	"github.com/sluicehq/sluice/internal/faultstore"
	"github.com/sluicehq/sluice/sluiceotel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// newStore returns a memory store that answers ErrUnavailable once taken
// down.
func newStore(t *testing.T) *faultstore.Store {
	t.Helper()
	mem, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mem.Close() })
	return faultstore.Wrap(mem)
}

// newObserver returns an observer recording into a ManualReader.
func newObserver(t *testing.T, opts ...sluiceotel.Option) (func(context.Context, string, sluice.Decision, error), *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	obs, err := sluiceotel.Observer(append([]sluiceotel.Option{sluiceotel.WithMeterProvider(mp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return obs, reader
}

func newLimiter(t *testing.T, name string, failOpen bool, st ratelimit.Store, obs func(context.Context, string, sluice.Decision, error)) *sluice.Limiter {
	t.Helper()
	lim, err := sluice.New(sluice.Rule{Name: name, Algorithm: gcra.New(), Limit: sluice.PerHour(1), FailOpen: failOpen},
		sluice.WithStore(st), sluice.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

func point(v int64, kv ...attribute.KeyValue) metricdata.DataPoint[int64] {
	return metricdata.DataPoint[int64]{Attributes: attribute.NewSet(kv...), Value: v}
}

func sum(points ...metricdata.DataPoint[int64]) metricdata.Sum[int64] {
	return metricdata.Sum[int64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true, DataPoints: points}
}

func TestMetrics(t *testing.T) {
	ctx := context.Background()
	obs, reader := newObserver(t)
	st := newStore(t)
	api := newLimiter(t, "api", false, st, obs)
	open := newLimiter(t, "open", true, st, obs)
	closed := newLimiter(t, "closed", false, st, obs)

	for i, want := range []bool{true, false, false} {
		d, err := api.Allow(ctx, "client-1")
		if err != nil || d.Allowed != want {
			t.Fatalf("api call %d: %+v, %v; want allowed=%v", i, d, err, want)
		}
	}
	st.SetDown(true)
	if d, _ := open.Allow(ctx, "client-1"); !d.Allowed || !d.ByPolicy {
		t.Fatalf("fail-open: %+v", d)
	}
	if d, err := closed.Allow(ctx, "client-1"); d.Allowed || !d.ByPolicy || !errors.Is(err, sluice.ErrUnavailable) {
		t.Fatalf("fail-closed: %+v, %v", d, err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	if len(rm.ScopeMetrics) != 1 {
		t.Fatalf("got %d scopes, want 1", len(rm.ScopeMetrics))
	}
	sm := rm.ScopeMetrics[0]
	if sm.Scope.Name != "github.com/sluicehq/sluice/sluiceotel" {
		t.Errorf("scope %q", sm.Scope.Name)
	}
	want := []metricdata.Metrics{
		{
			Name:        "sluice.decisions",
			Description: "Rate-limit decisions by rule and outcome.",
			Unit:        "{decision}",
			Data: sum(
				point(1, sluiceotel.RuleKey.String("api"), sluiceotel.OutcomeKey.String("allowed")),
				point(2, sluiceotel.RuleKey.String("api"), sluiceotel.OutcomeKey.String("denied")),
				point(1, sluiceotel.RuleKey.String("open"), sluiceotel.OutcomeKey.String("policy_allowed")),
				point(1, sluiceotel.RuleKey.String("closed"), sluiceotel.OutcomeKey.String("policy_denied")),
			),
		},
		{
			Name:        "sluice.store.errors",
			Description: "Store errors seen by rate-limit decisions, by rule and class.",
			Unit:        "{error}",
			Data: sum(
				point(1, sluiceotel.RuleKey.String("open"), sluiceotel.ErrorTypeKey.String("unavailable")),
				point(1, sluiceotel.RuleKey.String("closed"), sluiceotel.ErrorTypeKey.String("unavailable")),
			),
		},
	}
	if len(sm.Metrics) != len(want) {
		t.Fatalf("got %d metrics, want %d: %+v", len(sm.Metrics), len(want), sm.Metrics)
	}
	for i := range want {
		metricdatatest.AssertEqual(t, want[i], sm.Metrics[i], metricdatatest.IgnoreTimestamp())
	}
}

func TestErrorClasses(t *testing.T) {
	ctx := context.Background()
	obs, reader := newObserver(t)
	d := sluice.Decision{Rule: "r", ByPolicy: true}
	obs(ctx, "k", d, fmt.Errorf("x: %w", sluice.ErrUnknownOutcome))
	obs(ctx, "k", d, errors.New("boom"))
	obs(ctx, "k", d, fmt.Errorf("x: %w", sluice.ErrUnavailable))

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != "sluice.store.errors" {
			continue
		}
		metricdatatest.AssertAggregationsEqual(t, sum(
			point(1, sluiceotel.RuleKey.String("r"), sluiceotel.ErrorTypeKey.String("unknown_outcome")),
			point(1, sluiceotel.RuleKey.String("r"), sluiceotel.ErrorTypeKey.String("other")),
			point(1, sluiceotel.RuleKey.String("r"), sluiceotel.ErrorTypeKey.String("unavailable")),
		), m.Data, metricdatatest.IgnoreTimestamp())
		return
	}
	t.Fatal("no sluice.store.errors metric")
}

func TestMetricsCarryNoKey(t *testing.T) {
	ctx := context.Background()
	obs, reader := newObserver(t, sluiceotel.WithKeyInSpans())
	lim := newLimiter(t, "api", false, newStore(t), obs)
	for _, key := range []string{"a", "b", "c"} {
		if _, err := lim.Allow(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
			if _, ok := p.Attributes.Value(sluiceotel.KeyKey); ok {
				t.Errorf("%s has the key attribute: %v", m.Name, p.Attributes)
			}
		}
		if m.Name == "sluice.decisions" {
			metricdatatest.AssertAggregationsEqual(t, sum(
				point(3, sluiceotel.RuleKey.String("api"), sluiceotel.OutcomeKey.String("allowed")),
			), m.Data, metricdatatest.IgnoreTimestamp())
		}
	}
}

func newTracer(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, rec
}

func attrs(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestSpanEvents(t *testing.T) {
	for _, withKey := range []bool{false, true} {
		t.Run(fmt.Sprintf("key=%v", withKey), func(t *testing.T) {
			var opts []sluiceotel.Option
			if withKey {
				opts = append(opts, sluiceotel.WithKeyInSpans())
			}
			obs, _ := newObserver(t, opts...)
			tp, rec := newTracer(t)
			st := newStore(t)
			api := newLimiter(t, "api", false, st, obs)
			closed := newLimiter(t, "closed", false, st, obs)

			ctx, span := tp.Tracer("test").Start(context.Background(), "request")
			_, _ = api.Allow(ctx, "client-1")
			denied, _ := api.Allow(ctx, "client-1")
			st.SetDown(true)
			_, _ = closed.Allow(ctx, "client-1")
			span.End()

			spans := rec.Ended()
			if len(spans) != 1 {
				t.Fatalf("got %d spans, want 1 (the observer must not start spans)", len(spans))
			}
			events := spans[0].Events()
			if len(events) != 3 {
				t.Fatalf("got %d events, want 3", len(events))
			}
			for _, e := range events {
				if e.Name != "sluice.decision" {
					t.Errorf("event %q", e.Name)
				}
			}
			a := attrs(events[0].Attributes)
			if a["sluice.rule"].AsString() != "api" || !a["sluice.allowed"].AsBool() || a["sluice.remaining"].AsInt64() != 0 ||
				a["sluice.retry_after"].AsFloat64() != 0 || a["sluice.by_policy"].AsBool() {
				t.Errorf("allowed event: %v", events[0].Attributes)
			}
			if _, ok := a["error.type"]; ok {
				t.Errorf("allowed event has error.type: %v", events[0].Attributes)
			}
			if v, ok := a["sluice.key"]; ok != withKey || (withKey && v.AsString() != "client-1") {
				t.Errorf("sluice.key = %v, %v; want present=%v", v.String(), ok, withKey)
			}
			a = attrs(events[1].Attributes)
			if a["sluice.allowed"].AsBool() || a["sluice.retry_after"].AsFloat64() != denied.RetryAfter.Seconds() || denied.RetryAfter <= 0 {
				t.Errorf("denied event: %v (decision %+v)", events[1].Attributes, denied)
			}
			a = attrs(events[2].Attributes)
			if a["sluice.rule"].AsString() != "closed" || a["sluice.allowed"].AsBool() || !a["sluice.by_policy"].AsBool() ||
				a["error.type"].AsString() != "unavailable" || a["exception.message"].AsString() != faultstore.ErrDown.Error() {
				t.Errorf("fail-closed event: %v", events[2].Attributes)
			}
		})
	}
}

func TestNoEventWithoutRecordingSpan(t *testing.T) {
	obs, _ := newObserver(t)
	tp, rec := newTracer(t)
	lim := newLimiter(t, "api", false, newStore(t), obs)

	// A recording span exists, but the decision's context does not carry it.
	_, span := tp.Tracer("test").Start(context.Background(), "request")
	if _, err := lim.Allow(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	// A span that is not sampled is not recording.
	unsampled := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()), sdktrace.WithSpanProcessor(rec))
	ctx, quiet := unsampled.Tracer("test").Start(context.Background(), "unsampled")
	if _, err := lim.Allow(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	quiet.End()
	span.End()

	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("got %d spans, want 1 (the observer must not start spans)", len(spans))
	}
	if n := len(spans[0].Events()); n != 0 {
		t.Fatalf("span without the decision's context got %d events, want 0", n)
	}
}

func TestAllowedDecisionAllocatesNothing(t *testing.T) {
	obs, _ := newObserver(t)
	ctx := context.Background()
	d := sluice.Decision{Allowed: true, Remaining: 9, Limit: sluice.PerSecond(10), Rule: "api", ResetAfter: time.Second}
	obs(ctx, "k", d, nil) // fills the rule cache
	if n := testing.AllocsPerRun(1000, func() { obs(ctx, "k", d, nil) }); n != 0 {
		t.Errorf("observer allocates %v times per allowed decision without a span, want 0", n)
	}
}

// TestManyRulesConcurrently decides for more rule names than the cache
// holds, from several goroutines, and checks every decision is counted
// under its rule.
func TestManyRulesConcurrently(t *testing.T) {
	const goroutines, rules = 4, 5000
	// More series than the SDK's default cardinality limit (2000).
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithCardinalityLimit(4*rules))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	obs, err := sluiceotel.Observer(sluiceotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	done := make(chan struct{})
	for g := range goroutines {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range rules {
				obs(ctx, "k", sluice.Decision{Allowed: (i+g)%2 == 0, Rule: fmt.Sprint("r", i)}, nil)
			}
		}()
	}
	for range goroutines {
		<-done
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	points := rm.ScopeMetrics[0].Metrics[0].Data.(metricdata.Sum[int64]).DataPoints
	if len(points) != 2*rules {
		t.Fatalf("got %d series, want %d (a rule and an outcome each)", len(points), 2*rules)
	}
	for _, p := range points {
		if p.Value != goroutines/2 {
			t.Fatalf("%v = %d, want %d", p.Attributes, p.Value, goroutines/2)
		}
	}
}
