package sluiceotel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Names of the instruments, the span event and the attributes.
const (
	DecisionsMetric   = "sluice.decisions"
	StoreErrorsMetric = "sluice.store.errors"
	DecisionEvent     = "sluice.decision"

	RuleKey       = attribute.Key("sluice.rule")
	OutcomeKey    = attribute.Key("sluice.outcome")
	ErrorTypeKey  = attribute.Key("error.type")
	AllowedKey    = attribute.Key("sluice.allowed")
	RemainingKey  = attribute.Key("sluice.remaining")
	RetryAfterKey = attribute.Key("sluice.retry_after")
	ByPolicyKey   = attribute.Key("sluice.by_policy")
	KeyKey        = attribute.Key("sluice.key")
	MessageKey    = attribute.Key("exception.message")
)

// instrumentationName is the meter's name: the import path of this package.
const instrumentationName = "github.com/sluicehq/sluice/sluiceotel"

// maxCachedRules bounds the per-rule attribute cache.
const maxCachedRules = 4096

// The outcomes and error classes, as indexes into ruleOptions.
const (
	outcomeAllowed = iota
	outcomeDenied
	outcomePolicyAllowed
	outcomePolicyDenied
	numOutcomes
)

const (
	errUnavailable = iota
	errUnknownOutcome
	errOther
	numErrorClasses
)

var (
	outcomeNames = [numOutcomes]string{"allowed", "denied", "policy_allowed", "policy_denied"}
	errorNames   = [numErrorClasses]string{"unavailable", "unknown_outcome", "other"}
)

// Option configures Observer.
type Option func(*config)

type config struct {
	meterProvider metric.MeterProvider
	keyInSpans    bool
}

// WithMeterProvider makes the observer record its metrics through mp
// instead of otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.meterProvider = mp }
}

// WithKeyInSpans adds the decided key as attribute sluice.key to span
// events. Keys may identify users (addresses, account IDs): enable it only
// where traces may hold them. Metrics never carry the key.
func WithKeyInSpans() Option {
	return func(c *config) { c.keyInSpans = true }
}

// Observer returns a function for sluice.WithObserver and
// policy.WithObserver that records every decision as described in the
// package documentation. It fails only when the meter provider cannot
// create the instruments.
func Observer(opts ...Option) (func(ctx context.Context, key string, d sluice.Decision, err error), error) {
	cfg := config{}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.meterProvider == nil {
		cfg.meterProvider = otel.GetMeterProvider()
	}
	meter := cfg.meterProvider.Meter(instrumentationName)
	decisions, err := meter.Int64Counter(DecisionsMetric,
		metric.WithUnit("{decision}"),
		metric.WithDescription("Rate-limit decisions by rule and outcome."))
	if err != nil {
		return nil, fmt.Errorf("sluiceotel: %s: %w", DecisionsMetric, err)
	}
	storeErrors, err := meter.Int64Counter(StoreErrorsMetric,
		metric.WithUnit("{error}"),
		metric.WithDescription("Store errors seen by rate-limit decisions, by rule and class."))
	if err != nil {
		return nil, fmt.Errorf("sluiceotel: %s: %w", StoreErrorsMetric, err)
	}
	o := &observer{decisions: decisions, storeErrors: storeErrors, keyInSpans: cfg.keyInSpans}
	o.rules.Store(&map[string]*ruleOptions{})
	return o.observe, nil
}

type observer struct {
	decisions   metric.Int64Counter
	storeErrors metric.Int64Counter
	keyInSpans  bool

	// rules maps a rule name to its precomputed options; copy on write
	// under mu, so the hot path reads it without locking or allocating.
	rules atomic.Pointer[map[string]*ruleOptions]
	mu    sync.Mutex
}

// ruleOptions holds one rule's Add options: a slice per outcome and per
// error class, so that Add's variadic argument is not built per call.
type ruleOptions struct {
	outcomes [numOutcomes][]metric.AddOption
	errors   [numErrorClasses][]metric.AddOption
}

func newRuleOptions(rule string) *ruleOptions {
	r := &ruleOptions{}
	for i, name := range outcomeNames {
		set := attribute.NewSet(RuleKey.String(rule), OutcomeKey.String(name))
		r.outcomes[i] = []metric.AddOption{metric.WithAttributeSet(set)}
	}
	for i, name := range errorNames {
		set := attribute.NewSet(RuleKey.String(rule), ErrorTypeKey.String(name))
		r.errors[i] = []metric.AddOption{metric.WithAttributeSet(set)}
	}
	return r
}

// optionsFor returns rule's options, caching them up to maxCachedRules.
func (o *observer) optionsFor(rule string) *ruleOptions {
	if r, ok := (*o.rules.Load())[rule]; ok {
		return r
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	old := *o.rules.Load()
	if r, ok := old[rule]; ok {
		return r
	}
	r := newRuleOptions(rule)
	if len(old) >= maxCachedRules {
		return r
	}
	next := make(map[string]*ruleOptions, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[rule] = r
	o.rules.Store(&next)
	return r
}

func (o *observer) observe(ctx context.Context, key string, d sluice.Decision, err error) {
	r := o.optionsFor(d.Rule)
	o.decisions.Add(ctx, 1, r.outcomes[outcomeOf(&d)]...)
	class := -1
	if err != nil {
		class = errorClass(err)
		o.storeErrors.Add(ctx, 1, r.errors[class]...)
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs,
		RuleKey.String(d.Rule),
		AllowedKey.Bool(d.Allowed),
		RemainingKey.Int64(d.Remaining),
		RetryAfterKey.Float64(d.RetryAfter.Seconds()),
		ByPolicyKey.Bool(d.ByPolicy),
	)
	if err != nil {
		attrs = append(attrs, ErrorTypeKey.String(errorNames[class]), MessageKey.String(err.Error()))
	}
	if o.keyInSpans {
		attrs = append(attrs, KeyKey.String(key))
	}
	span.AddEvent(DecisionEvent, trace.WithAttributes(attrs...))
}

func outcomeOf(d *sluice.Decision) int {
	switch {
	case d.ByPolicy && d.Allowed:
		return outcomePolicyAllowed
	case d.ByPolicy:
		return outcomePolicyDenied
	case d.Allowed:
		return outcomeAllowed
	default:
		return outcomeDenied
	}
}

func errorClass(err error) int {
	switch {
	case errors.Is(err, sluice.ErrUnavailable):
		return errUnavailable
	case errors.Is(err, sluice.ErrUnknownOutcome):
		return errUnknownOutcome
	default:
		return errOther
	}
}
