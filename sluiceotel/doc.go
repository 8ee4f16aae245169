// Package sluiceotel reports Sluice decisions to OpenTelemetry: metrics
// through a metric.MeterProvider and events on the caller's trace span.
// It is an adapter module of its own, so the core stays stdlib-only.
//
// Use it as the observer of a limiter, a composite or a policy engine:
//
//	obs, err := sluiceotel.Observer() // otel.GetMeterProvider() by default
//	if err != nil { ... }
//	lim, err := sluice.New(rule, sluice.WithObserver(obs))
//	engine, err := policy.New(set, policy.WithObserver(obs))
//
// # Metrics
//
//   - sluice.decisions (Int64Counter, unit {decision}): every decision,
//     with attributes sluice.rule (the rule name) and sluice.outcome, one
//     of "allowed", "denied", "policy_allowed" and "policy_denied" (the
//     store failed and the rule's failure policy decided: fail open or
//     fail closed).
//   - sluice.store.errors (Int64Counter, unit {error}): every decision that
//     came with a store error, with attributes sluice.rule and error.type,
//     one of "unavailable" (errors.Is sluice.ErrUnavailable: the store
//     certainly did not apply the call), "unknown_outcome" (errors.Is
//     sluice.ErrUnknownOutcome: it may have) and "other".
//
// The key is never a metric attribute: keys are unbounded (one per client)
// and would explode the number of time series. Rule names are bounded by
// the configuration.
//
// # Traces
//
// When the context passed to the limiter carries a recording span, the
// observer adds an event "sluice.decision" to it with attributes
// sluice.rule, sluice.allowed, sluice.remaining, sluice.retry_after
// (seconds, float), sluice.by_policy and, when the decision came with a
// store error, error.type and exception.message. WithKeyInSpans adds
// sluice.key. The observer never starts a span: it runs on the hot path,
// and the caller's span (an HTTP or gRPC server span) is where the
// decision belongs.
//
// # Cost
//
// Without a recording span, an observed decision is one map lookup and
// one counter Add with a precomputed attribute set: with the SDK it
// allocates nothing per call (checked by the tests). Attribute sets are
// cached per rule name, for at most 4096 rule names; beyond that each
// call builds its set.
//
// Exporters (OTLP, Prometheus, stdout) are the application's choice: set
// the global providers (otel.SetMeterProvider, otel.SetTracerProvider) or
// pass WithMeterProvider. See docs/otel.md.
package sluiceotel
