package main

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluicehq/sluice/policy"
)

// metrics are the service's Prometheus metrics. Labels are bounded: a
// domain label is recorded only for domains that have rules (an unknown
// domain is counted as a request outcome only), rule labels are the
// rules' names.
type metrics struct {
	registry     *prometheus.Registry
	requests     *prometheus.CounterVec   // api, outcome
	decisions    *prometheus.CounterVec   // domain, rule, outcome
	shadowHits   *prometheus.CounterVec   // domain, rule
	byPolicy     *prometheus.CounterVec   // domain, rule, outcome
	storeLatency *prometheus.HistogramVec // backend
	reloads      prometheus.Counter
	reloadErrors prometheus.Counter
	backend      string
}

func newMetrics(backend string) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		backend:  backend,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_requests_total",
			Help: "Requests by API (grpc, json, forward_auth) and outcome (ok, over_limit, invalid, error).",
		}, []string{"api", "outcome"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decisions_total",
			Help: "Rule decisions by domain, rule and outcome (allowed, denied, shadow_denied, unlimited).",
		}, []string{"domain", "rule", "outcome"}),
		shadowHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_shadow_hits_total",
			Help: "Denials by rules in shadow mode, which let the request through.",
		}, []string{"domain", "rule"}),
		byPolicy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_failure_policy_decisions_total",
			Help: "Decisions made by a rule's failure policy because the store failed or ran out of budget, by outcome (allowed, denied).",
		}, []string{"domain", "rule", "outcome"}),
		storeLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_store_latency_seconds",
			Help:    "Time of one atomic decision through the store, by backend.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"backend"}),
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_rule_reloads_total",
			Help: "Rule reloads that took effect.",
		}),
		reloadErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_rule_reload_errors_total",
			Help: "Rule reloads refused because the new rules were invalid; the previous rules stay.",
		}),
	}
	m.registry.MustRegister(m.requests, m.decisions, m.shadowHits, m.byPolicy, m.storeLatency,
		m.reloads, m.reloadErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// countReload counts a reload of the rules, refused or in force.
func (m *metrics) countReload(r policy.Reload) {
	if r.Err != nil {
		m.reloadErrors.Inc()
		return
	}
	m.reloads.Inc()
}

// observe records one engine call.
func (m *metrics) observe(api, domain string, res *policy.Result, err error, elapsed time.Duration) {
	switch {
	case err != nil && errors.Is(err, policy.ErrUnknownDomain):
		m.requests.WithLabelValues(api, "invalid").Inc()
		return
	case err != nil && isBadRequest(err):
		m.requests.WithLabelValues(api, "invalid").Inc()
		return
	}
	m.storeLatency.WithLabelValues(m.backend).Observe(elapsed.Seconds())
	switch {
	case err != nil && len(res.Statuses) == 0:
		m.requests.WithLabelValues(api, "error").Inc()
		return
	case res.Allowed:
		m.requests.WithLabelValues(api, "ok").Inc()
	default:
		m.requests.WithLabelValues(api, "over_limit").Inc()
	}
	for i := range res.Statuses {
		st := &res.Statuses[i]
		if !st.Matched {
			continue
		}
		rule := st.Decision.Rule
		outcome := "allowed"
		switch {
		case st.Unlimited:
			outcome = "unlimited"
		case !st.Decision.Allowed && st.Shadow:
			outcome = "shadow_denied"
			m.shadowHits.WithLabelValues(domain, rule).Inc()
		case !st.Decision.Allowed:
			outcome = "denied"
		}
		m.decisions.WithLabelValues(domain, rule, outcome).Inc()
		if st.Decision.ByPolicy {
			po := "allowed"
			if !st.Decision.Allowed {
				po = "denied"
			}
			m.byPolicy.WithLabelValues(domain, rule, po).Inc()
		}
	}
}
